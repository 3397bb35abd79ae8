"""A port belongs to one `fwx serve`: a second server on it fails with one line naming the port and the holder."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import serving_models

from fwx.errors import UsageError
from fwx.serving.sockets import bind_tcp

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(repo: Path, http: int, grpc: int) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "fwx", "serve", str(repo), "--http-port", str(http), "--grpc-port", str(grpc)]
    argv += ["--poll-seconds", "0", "--workers", "2"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def _wait_ready(proc: subprocess.Popen[str], url: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0]
        try:
            if httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)  # polling interval of a condition with a deadline, not a synchronisation
    raise AssertionError("the first server never became ready")


def test_second_server_on_a_served_port_exits_2_naming_port_and_pid(tmp_path: Path) -> None:
    first_repo, second_repo = tmp_path / "first", tmp_path / "second"
    serving_models.publish(first_repo, "linear", *serving_models.build_linear())
    serving_models.publish(second_repo, "other", *serving_models.build_linear())
    http, grpc = _free_port(), _free_port()
    url = f"http://127.0.0.1:{http}"
    first = _serve(first_repo, http, grpc)
    try:
        _wait_ready(first, url)
        second = _serve(second_repo, http, grpc)
        out, _ = second.communicate(timeout=120)
        assert second.returncode == 2, out
        lines = [line for line in out.splitlines() if line.strip()]
        assert lines[0] == f"error: port {http} (HTTP) is already served by another fwx serve (pid {first.pid})", out
        assert lines[1:] == ["  hint: stop that server or choose another --http-port"], out
        body = {"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [4.0]}]}
        for _ in range(8):  # connections spread over the workers: every one answers for the first repository
            with httpx.Client() as client:
                r = client.post(f"{url}/v2/models/linear/infer", json=body, timeout=30)
            assert r.status_code == 200, r.text
            assert r.json()["outputs"][0]["data"] == [9.0]
    finally:
        first.terminate()
        first.communicate(timeout=60)
    assert first.returncode == 0


def test_the_claim_is_released_with_the_socket() -> None:
    first = bind_tcp("127.0.0.1", 0, reuse_port=True, claim=True)
    port = int(first.getsockname()[1])
    with pytest.raises(
        UsageError, match=rf"port {port} \(gRPC\) is already served by another fwx serve \(pid {os.getpid()}\)"
    ):
        bind_tcp("127.0.0.1", port, reuse_port=True, claim=True, what="gRPC", flag="--grpc-port")
    first.close()
    bind_tcp("127.0.0.1", port, reuse_port=True, claim=True).close()
