"""The snapshot walk against a writer that swaps a subfolder for a symlink to a host folder, mid-copy.

``renameat2(RENAME_EXCHANGE)`` exchanges two names atomically: the model's
``variables/`` folder and a symlink (kept outside the model) to a folder holding
a secret under the same file names. Whatever moment the swap lands, the snapshot
either refuses or copies the real files: the secret never reaches the copy.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

import pytest

from fwx.errors import FwxError
from fwx.safety import beneath, snapshot

RENAME_EXCHANGE = 2
SECRET = b"host-secret-7f3a"
ROUNDS = 100


def _exchange(a: Path, b: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd = -100
    if libc.renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _layout(tmp_path: Path) -> tuple[Path, Path, Path]:
    model = tmp_path / "model.savedmodel"
    (model / "variables" / "deep").mkdir(parents=True)
    (model / "saved_model.pb").write_bytes(b"graph")
    for name in ("variables.index", "deep/variables.data-00000-of-00001"):
        (model / "variables" / name).write_bytes(b"weights")
    host = tmp_path / "host"
    (host / "deep").mkdir(parents=True)
    for name in ("variables.index", "deep/variables.data-00000-of-00001"):
        (host / name).write_bytes(SECRET)
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "variables").symlink_to(host, target_is_directory=True)
    return model, model / "variables", staging / "variables"


def _secret_in(folder: Path) -> bool:
    return any(p.is_file() and SECRET in p.read_bytes() for p in folder.rglob("*"))


@pytest.mark.parametrize("openat2", [True, False], ids=["openat2", "dirfd-walk"])
def test_the_swap_race_never_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, openat2: bool) -> None:
    monkeypatch.setattr(beneath, "_openat2_works", None if openat2 else False)
    model, inside, outside = _layout(tmp_path)
    _exchange(inside, outside)  # the kernel supports the exchange: fail here, not silently in the thread
    _exchange(inside, outside)
    stop = threading.Event()
    swaps = [0]

    def swapper() -> None:
        while not stop.is_set():
            _exchange(inside, outside)
            swaps[0] += 1

    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    outcomes = {"refused": 0, "copied": 0}
    try:
        for i in range(ROUNDS):
            try:
                snap = snapshot.take(model, parent=tmp_path)
            except FwxError:
                outcomes["refused"] += 1
                continue
            try:
                assert not _secret_in(snap.root), f"round {i}: a host file reached the snapshot"
                assert (snap.path / "saved_model.pb").read_bytes() == b"graph"
                outcomes["copied"] += 1
            finally:
                snap.discard()
    finally:
        stop.set()
        thread.join()
    assert sum(outcomes.values()) == ROUNDS
    assert swaps[0] > 0


def test_the_same_swap_of_a_loose_files_folder_never_wins(tmp_path: Path) -> None:
    """A loose file's folder swapped for a link: the data file is opened from the folder's descriptor."""
    folder = tmp_path / "dl"
    folder.mkdir()
    (folder / "w.bin").write_bytes(b"weights")
    host = tmp_path / "host"
    host.mkdir()
    (host / "w.bin").write_bytes(SECRET)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        staging = tmp_path / "staging"
        staging.mkdir()
        (staging / "dl").symlink_to(host, target_is_directory=True)
        _exchange(folder, staging / "dl")  # after the folder was opened: the descriptor still names the real one
        data = beneath.open_beneath(fd, "w.bin")
        try:
            assert os.read(data, 64) == b"weights"
        finally:
            os.close(data)
    finally:
        os.close(fd)
