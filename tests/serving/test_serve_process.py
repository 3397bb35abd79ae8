"""`fwx serve` as a real process: live before ready, ready only after warm-up, SIGTERM drains and exits 0."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import httpx
import pytest
import serving_models

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ITERATIONS = 1_000_000  # ~0.85 s per run of the sleepy model: a slow warm-up and slow requests


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status(url: str) -> int | None:
    """The status code, or None when nothing listens (a slow answer on a loaded machine is waited for)."""
    try:
        return httpx.get(url, timeout=30).status_code
    except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):  # refused, or closed mid-answer
        return None


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    repo = tmp_path_factory.mktemp("proc") / "repo"
    onnx_bytes, sig = serving_models.build_sleepy(ITERATIONS)
    serving_models.publish(repo, "sleepy", onnx_bytes, sig)
    port = _free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
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
            "--drain-seconds",
            "300",  # a deadline, not an expectation: under load six sleepy requests can take well over 20 s
            "--poll-seconds",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    yield proc, f"http://127.0.0.1:{port}"
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def test_live_before_ready_then_ready_after_warmup(served: Any) -> None:
    proc, url = served
    seen: set[tuple[int | None, int | None]] = set()
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        state = (_status(f"{url}/v2/health/live"), _status(f"{url}/v2/health/ready"))
        seen.add(state)
        if state == (200, 200):
            break
        time.sleep(0.05)
    assert (200, 200) in seen, seen
    assert (200, 400) in seen, f"never saw live-but-not-ready while loading: {seen}"
    model_stats = httpx.get(f"{url}/v2/models/sleepy/stats").json()["model_stats"][0]
    assert model_stats["execution_count"] == 0  # the warm-up ran on the runtime, not through the batcher


def test_sigterm_answers_in_flight_requests_then_exits_0(served: Any) -> None:
    proc, url = served
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [4.0]}]})
    results: list[Any] = []

    def client() -> None:
        try:
            r = httpx.post(f"{url}/v2/models/sleepy/infer", content=body, timeout=300)
            results.append(r.status_code if r.status_code == 200 else r.text)
        except httpx.HTTPError as exc:
            results.append(repr(exc))

    threads = [threading.Thread(target=client) for _ in range(6)]
    for t in threads:
        t.start()
    serving_models.wait_queued(url, 5)  # one running, five queued behind it
    proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the listener closes: a probe or request on a new connection is refused
        if _status(f"{url}/v2/health/ready") is None:
            break
        time.sleep(0.01)
    with pytest.raises(httpx.ConnectError):
        httpx.post(f"{url}/v2/models/sleepy/infer", content=body, timeout=5)
    for t in threads:
        t.join(300)
    assert results == [200] * 6, results
    assert proc.wait(300) == 0
    out = proc.stdout.read()
    for needle in ("curl", "/v2/models/sleepy/infer", "/v1/models/sleepy:predict", "tritonclient"):
        assert needle in out, out[-2000:]
