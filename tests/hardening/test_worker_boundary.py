"""A worker of ``fwx serve`` is untrusted too: hostile code in worker 0 stays inside worker 0.

The payload (``worker_payload.py``, injected through a ``sitecustomize`` the
way ``test_sandbox_serve.py`` does) starts in worker 0 once its sandbox is on
and tries to read the directory ``fwx serve`` was started from (a home with
``.ssh/id_rsa``), find the API token in the supervisor's or its own
command line and environment, forge its peer's and the supervisor's records,
kill its peer and the supervisor, plant a probe verdict, and feed the
supervisor and its peer malformed records of its own. Meanwhile a client keeps
calling the healthy model on fresh connections (the kernel spreads them over
both workers): every answer must be 200 and readiness must never say 400. At
the end it names the healthy model in its own loading mark and kills itself:
the supervisor's own trial loads that model cleanly, so nothing is
quarantined, worker 0 comes back and the pod is ready again.
"""

from __future__ import annotations

import errno
import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fwx.manifest import ArtifactEntry, Manifest, SourceInfo, sha256_path
from fwx.repository import Repository
from fwx.safety import landlock
from fwx.signature import Signature, TensorSpec

from . import worker_payload
from .conftest import _good_onnx

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(landlock.abi_version() < 6, reason="needs Landlock with signal scoping (ABI 6)"),
]
ROOT = Path(__file__).resolve().parents[2]
SIG = Signature((TensorSpec("x", "float32", (-1, 1)),), (TensorSpec("y", "float32", (-1, 1)),))
KEY_TEXT = "-----BEGIN OPENSSH PRIVATE KEY----- fwx-test-home-key"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _publish(repo: Path, name: str) -> None:
    with Repository(repo).staging(name, None) as st:
        _good_onnx(st.path / "model.onnx")
        entry = ArtifactEntry(
            format="onnx",
            path="model.onnx",
            sha256=sha256_path(st.path / "model.onnx"),
            size_bytes=(st.path / "model.onnx").stat().st_size,
            signature=SIG.to_json(),
        )
        source = SourceInfo(path="(built in test)", sha256="", format="onnx", framework="onnx")
        st.publish(Manifest(name=name, version=0, source=source, signature=SIG.to_json(), artifacts={"m": entry}))


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _status(port: int, method: str, path: str, token: str, body: bytes | None = None) -> int | str:
    """One request on a fresh connection (the kernel picks the worker): its status or the connection error."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except (OSError, http.client.HTTPException) as exc:
        return repr(exc)
    finally:
        conn.close()


def _children(pid: int) -> list[int]:
    return sorted(int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("boundary")
    home = base / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(KEY_TEXT)
    repo = base / "repo"
    _publish(repo, "good")
    hook = base / "hook"
    hook.mkdir()
    shutil.copy(Path(worker_payload.__file__), hook / "worker_payload.py")
    (hook / "sitecustomize.py").write_text("import worker_payload\nworker_payload.install()\n")
    token = "fwx-tok-" + secrets.token_hex(12)
    port = _free_port()
    env = {
        **os.environ,
        "PYTHONPATH": f"{hook}:{ROOT}",
        "PYTHONUNBUFFERED": "1",
        "FWX_API_TOKEN": token,
        "FWX_TEST_PAYLOAD_SLOT": "0",
        "FWX_TEST_REVERSED_WORD": token[::-1],
        "TMPDIR": str(base),
    }
    cmd = [sys.executable, "-m", "fwx", "serve", str(repo), "--http-port", str(port), "--grpc-port", "-1"]
    cmd += ["--workers", "2", "--poll-seconds", "0", "--require-sandbox"]
    log = base / "serve.log"
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=home)
    yield {"proc": proc, "port": port, "token": token, "log": log}
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _outcomes(log: Path) -> dict[str, str]:
    found = {}
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith(worker_payload.PREFIX + " "):
            _, attempt, outcome = line.split(" ", 2)
            found[attempt] = outcome
    return found


def test_hostile_code_in_one_worker_stays_in_that_worker(server: dict[str, Any]) -> None:
    proc, port, token, log = server["proc"], server["port"], server["token"], server["log"]
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [4.0]}]}).encode()
    _wait(
        lambda: proc.poll() is not None or _status(port, "GET", "/v2/health/ready", token) == 200,
        240,
        "the server to be ready",
    )
    assert proc.poll() is None, log.read_text()[-3000:]
    workers = _children(proc.pid)
    assert len(workers) == 2
    answers: list[int | str] = []
    ready: list[int | str] = []

    def restarted() -> bool:
        """Worker 0 died blaming the healthy model, was judged by the supervisor's trial, and is back."""
        now = _children(proc.pid)
        return "not quarantined" in log.read_text(errors="replace") and len(now) == 2 and workers[0] not in now

    end = time.monotonic() + 300
    while time.monotonic() < end and proc.poll() is None and not (restarted() and ready[-1:] == [200]):
        answers.append(_status(port, "POST", "/v2/models/good/infer", token, body))
        answers.append(_status(port, "GET", "/metrics", token))
        ready.append(_status(port, "GET", "/v2/health/ready", token))
    text = log.read_text(errors="replace")
    outcomes = _outcomes(log)
    assert outcomes.get("end") == "ok", text[-3000:]
    denied = "read-start-dir forge-peer-loading forge-quarantine forge-board forge-probe-mark forge-dead-metrics"
    for attempt in denied.split():
        assert outcomes.get(attempt) == "denied", (attempt, outcomes, text[-3000:])
    # Landlock's signal scope refuses (EPERM) or, in the worker's own PID namespace, there is no such process
    for attempt in ("kill-peer", "kill-supervisor"):
        assert outcomes.get(attempt) in ("denied", f"error-{errno.ESRCH}"), (attempt, outcomes, text[-3000:])
    for attempt in ("own-environ-token", "os-environ-token"):
        assert outcomes[attempt] == "absent", (attempt, outcomes)
    assert outcomes["supervisor-cmdline-token"] in ("absent", "unreachable"), outcomes
    # non-dumpable, and the worker holds no capability; in its PID namespace the supervisor has no /proc entry
    assert outcomes["supervisor-environ"] in ("denied", f"error-{errno.ENOENT}"), outcomes
    assert outcomes["own-malformed-loading"] == "done:written"
    assert "malformed loading mark" in text, text[-3000:]  # read, logged, ignored
    # What worker 0 holds when it kills itself dies with it, as in any crash: the request it is answering and
    # a connection the kernel queued on its listener meanwhile (the kernel hands a dead listener's queue to
    # its peer only with net.ipv4.tcp_migrate_req). The client is sequential: at most those two.
    lost = [a for a in [*answers, *ready] if isinstance(a, str)]
    assert len(lost) <= 2, (lost, text[-3000:])
    cut = ("ConnectionReset", "RemoteDisconnected", "BrokenPipe", "IncompleteRead")  # mid-answer, too
    assert all(any(w in a for w in cut) for a in lost), lost
    bad = [a for a in answers if isinstance(a, int) and a != 200]
    assert bad == [], (f"{len(bad)} of {len(answers)} requests failed, e.g. {bad[:3]}", text[-3000:])
    assert [r for r in ready if isinstance(r, int) and r not in (200, 503)] == [], ready  # 503 while it restarts
    assert ready[-1] == 200
    assert proc.poll() is None
    assert workers[1] in _children(proc.pid)  # the peer was never killed
    assert outcomes["die-blaming"] == "good"
    (run,) = Path(str(log.parent)).glob("fwx-serve-*")
    assert json.loads((run / "quarantine.json").read_text()) == {}  # its word alone quarantines nothing
    assert KEY_TEXT not in text


def test_no_process_of_the_server_holds_the_token_in_argv_or_environ(server: dict[str, Any]) -> None:
    proc, token = server["proc"], server["token"].encode()
    for pid in [proc.pid, *_children(proc.pid)]:
        for what in ("cmdline", "environ"):
            try:
                assert token not in Path(f"/proc/{pid}/{what}").read_bytes(), (pid, what)
            except PermissionError:
                continue  # the supervisor is not dumpable: its environ is closed to its own user too
