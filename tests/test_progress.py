"""Progress on stderr: a live rich spinner with the step's name and elapsed time on a terminal, plain
lines when stderr is a file or pipe, nothing under --json."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

from exporter.fixtures import CNN_CLASS, CNN_INPUT, _reset_ui, _samples_importable, cli
from exporter.fixtures import torch_files as torch_files

__all__ = ["_reset_ui", "_samples_importable", "cli", "torch_files"]
ROOT = Path(__file__).resolve().parents[1]
CNN = ["--model-class", CNN_CLASS, "--input", CNN_INPUT, "--to", "onnx"]
SPINNER = re.compile("[\u2800-\u28ff]")  # rich's default "dots" spinner frames


def test_plain_lines_when_not_a_terminal(cli, torch_files, tmp_path: Path) -> None:
    res = cli("export", torch_files["state_dict"], *CNN, "--out", tmp_path)
    assert res.code == 0, res.err
    for name in (f"load {torch_files['state_dict']}", "pin signature", "export onnx", "publish"):
        assert f"• {name} …" in res.err
        assert re.search(rf"✓ {re.escape(name)} \(\d+\.\ds\)", res.err), res.err
    assert not SPINNER.search(res.err)
    assert "\x1b[" not in res.err.replace("\x1b[32m", "").replace("\x1b[0m", "")  # colour at most, no cursor moves


def test_nothing_on_stderr_under_json(cli, torch_files, tmp_path: Path) -> None:
    res = cli("export", torch_files["state_dict"], *CNN, "--out", tmp_path, "--json")
    assert res.code == 0, res.err
    assert "•" not in res.err
    assert "✓" not in res.err
    assert res.out.lstrip().startswith("{")


def test_live_spinner_with_elapsed_time_on_a_terminal(torch_files, tmp_path: Path) -> None:
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm-256color", "COLUMNS": "120"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "fwx", "export", str(torch_files["state_dict"]), *CNN, "--out", str(tmp_path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        env=env,
        cwd=ROOT,
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=60)
    os.close(master)
    out = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0, out[-3000:]
    assert SPINNER.search(out), out[-2000:]
    assert re.search(r"export onnx.*\d+\.\ds", out), out[-2000:]  # the live row: name and elapsed seconds
    assert re.search(r"✓ publish .*\(\d+\.\ds\)", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out))
