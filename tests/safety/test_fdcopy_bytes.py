"""The snapshot's byte copy: in the kernel where it can, through the process where it cannot, same bytes."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from fwx.safety.fdcopy import _copy_bytes

DATA = bytes(range(256)) * 5000  # more than one 1 MiB block would be, less than a pipe must take at once


def test_a_file_is_copied_whole(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(DATA)
    with open(tmp_path / "a", "rb") as src, open(tmp_path / "b", "xb") as dst:
        _copy_bytes(src, dst)
    assert (tmp_path / "b").read_bytes() == DATA


def test_a_source_the_kernel_cannot_copy_from_is_copied_through_the_process(tmp_path: Path) -> None:
    r, w = os.pipe()  # copy_file_range refuses a pipe (EINVAL): the fallback path

    def feed() -> None:
        with os.fdopen(w, "wb") as fh:
            fh.write(DATA)

    writer = threading.Thread(target=feed)
    writer.start()
    with os.fdopen(r, "rb") as src, open(tmp_path / "b", "xb") as dst:
        _copy_bytes(src, dst)
    writer.join(timeout=60)
    assert (tmp_path / "b").read_bytes() == DATA
