"""The command line's error paths, run as the user runs them: a real ``fwx`` process per case.

Each case was found by attacking the command line rather than by reading its code: a folder that is no
model, ``--json`` with a usage error or an interrupt, and a SIGINT sent to fwx's own process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def fwx(*argv: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fwx", *map(str, argv)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_a_folder_that_is_no_model_is_refused_by_its_names_not_copied_whole(tmp_path: Path) -> None:
    """``fwx export ~`` used to copy the whole folder into a private snapshot before refusing it (``/tmp``
    filled the disk); a FIFO deep inside shows whether the copy was tried."""
    folder = tmp_path / "home"
    (folder / "deep" / "er").mkdir(parents=True)
    (folder / "notes.txt").write_text("not a model")
    os.mkfifo(folder / "deep" / "er" / "pipe")
    res = fwx("export", folder, "--to", "onnx", "--out", tmp_path / "out", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert "neither a SavedModel" in res.stderr, res.stderr
    assert "not a regular file" not in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize(
    "argv",
    [
        ["export"],  # a missing argument
        ["export", "x.pt", "--model-version", "0"],  # a value out of range
        ["validate", "/nonexistent/version"],  # a path click checks
        ["nosuch"],  # no such command
    ],
)
def test_json_usage_errors_are_one_json_document(tmp_path: Path, argv: list[str]) -> None:
    """``--json`` promises one document on stdout; a usage error left stdout empty."""
    res = fwx("--json", *argv, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    doc = json.loads(res.stdout)
    assert doc["ok"] is False, doc
    assert doc["exit_code"] == 2, doc
    assert doc["error"], doc
    assert "Traceback" not in res.stderr


def test_without_json_a_usage_error_prints_nothing_on_stdout(tmp_path: Path) -> None:
    res = fwx("export", cwd=tmp_path)
    assert res.returncode == 2
    assert res.stdout == ""
    assert "Missing argument" in res.stderr


def _export_until(argv: list[str], cwd: Path, marker: str, *, group: bool) -> subprocess.Popen[str]:
    """An export started in its own session, returned once its stderr shows ``marker``."""
    err = cwd / "stderr.txt"
    with err.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fwx", *argv],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=sink,
            text=True,
            start_new_session=group,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    deadline = time.monotonic() + 240
    while marker not in err.read_text() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # polling a condition with a deadline, not synchronising by sleeping
    assert proc.poll() is None, err.read_text()
    return proc


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code", "said"), [(signal.SIGINT, 130, "aborted"), (signal.SIGTERM, 143, "stopped")])
def test_a_signal_to_fwx_alone_stops_the_export_and_publishes_nothing(
    tmp_path: Path, sig: int, code: int, said: str
) -> None:
    """``kill -INT <pid>`` (a script, ``timeout -s INT``, a notebook's interrupt) reaches fwx's own process
    only; it ignored SIGINT while its loader ran, so the export went on and published with exit 0. ``kill``'s
    SIGTERM is passed on too, and said as a stop (it read as the loader killed, with a memory hint)."""
    from exporter.hf_folders import tiny_config, transformers

    folder = tmp_path / "tiny-bert"
    transformers().BertForSequenceClassification(tiny_config("BertConfig")).save_pretrained(folder)
    out = tmp_path / "out"
    argv = ["--json", "export", str(folder), "--to", "torchscript,onnx,tflite", "--out", str(out)]
    proc = _export_until(argv, tmp_path, "-> (", group=False)  # the signature is pinned: exports start
    proc.send_signal(sig)
    stdout, _ = proc.communicate(timeout=240)
    err = (tmp_path / "stderr.txt").read_text()
    assert proc.returncode == code, err
    assert "Traceback" not in err
    assert "memory" not in err
    assert not list(out.rglob("fwx.json")), sorted(out.rglob("*"))
    assert not list(out.rglob(".fwx-*")), sorted(out.rglob("*"))
    doc = json.loads(stdout)
    assert doc["ok"] is False, doc
    assert doc["exit_code"] == code, doc
    assert said in doc["error"], doc


@pytest.mark.parametrize(("path", "said"), [("/dev/zero", "is not a file"), ("/nonexistent.npz", "does not exist")])
def test_example_inputs_that_are_no_file_say_so(tmp_path: Path, path: str, said: str) -> None:
    """A folder or a device "did not exist"."""
    from fwx.errors import InputError
    from fwx.exporter.pinning import load_example_inputs

    for named in (path, tmp_path):
        with pytest.raises(InputError, match="is not a file" if named == tmp_path else said):
            load_example_inputs(named)
