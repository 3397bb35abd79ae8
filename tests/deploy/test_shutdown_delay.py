"""``fwx serve --shutdown-delay-seconds``: after SIGTERM, not ready at once but still serving for the delay,
then new connections are refused while in-flight work drains, then exit 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import serving_models
from fleet import free_port

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
ITERATIONS = 1_500_000  # ~1.3 s per run of the sleepy model; four runs, one at a time, outlast the delay
DELAY_S = 3.0
CLIENTS = 4
BODY = json.dumps({"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [4.0]}]})


def _post(url: str, out: list[Any]) -> None:
    try:
        r = httpx.post(f"{url}/v2/models/sleepy/infer", content=BODY, timeout=120)
        out.append(r.status_code if r.status_code == 200 else r.text)
    except httpx.HTTPError as exc:
        out.append(repr(exc))


def test_sigterm_keeps_serving_for_the_delay_then_drains(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    serving_models.publish(repo, "sleepy", *serving_models.build_sleepy(ITERATIONS))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fwx",
            "serve",
            str(repo),
            "--http-port",
            str(port),
            "--grpc-port",
            "-1",
            "--poll-seconds",
            "0",
            "--no-load-probe",
            "--shutdown-delay-seconds",
            str(DELAY_S),
            "--drain-seconds",
            "90",
            "--max-batch-size",
            "1",
            "--request-timeout-seconds",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        deadline = time.monotonic() + 90
        while not _ready(url):
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "not ready after 90 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 400  # not ready at once
        early: list[Any] = []
        clients = [threading.Thread(target=_post, args=(url, early)) for _ in range(CLIENTS)]
        for t in clients:  # sent after SIGTERM, inside the delay: served
            t.start()
        serving_models.wait_queued(url, CLIENTS - 1)  # one running, the rest queued: in flight past the delay
        _wait_refused(url)  # after the delay the listener is closed: the balancer retries elsewhere
        for t in clients:
            t.join(90)
        assert early == [200] * CLIENTS, early
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _wait_refused(url: str, timeout: float = 60.0) -> None:
    """New connections are refused (the event), while the queued requests are still running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/v2/health/live", timeout=10)
        except httpx.ConnectError:
            return
        except httpx.TransportError:
            pass  # accepted just as the listener closed (reset, not refused): ask again
        time.sleep(0.05)
    raise AssertionError(f"new connections still accepted {timeout:g} s after SIGTERM")
