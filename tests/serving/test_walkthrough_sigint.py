"""Ctrl-C on `make run` while it serves: the terminal signals the whole process group; exit 0 after the drain."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import serving_models

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("when", ["serving", "starting"])
def test_ctrl_c_to_the_process_group_exits_zero(tmp_path: Path, when: str) -> None:
    repo = tmp_path / "artifacts"
    # a slow warm-up (~1 s a run) leaves a window where the server is live but not ready yet
    serving_models.publish(repo, "sleepy", *serving_models.build_sleepy(1_000_000))
    port = _free_port()
    code = (
        "import sys; from pathlib import Path; from samples.walkthrough import serve; "
        f"sys.exit(serve(Path({str(repo)!r}), extra=('--http-port', '{port}', '--grpc-port', '-1', "
        "'--poll-seconds', '0')))"
    )
    # Own session = own process group, as a terminal's foreground job is.
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        deadline = time.monotonic() + 120
        url = f"http://127.0.0.1:{port}/v2/health/" + ("ready" if when == "serving" else "live")
        while not _ok(url):  # "starting": listening, still loading and warming up the model
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, out
    assert "Traceback" not in out
    assert "stopping without waiting" not in out  # one Ctrl-C is one signal: a drain, not a forced stop
