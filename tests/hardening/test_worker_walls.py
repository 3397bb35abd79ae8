"""The walls of ``fwx serve``'s workers, trusted model code or not: code inside a worker tries to get out.

The payload (``walls_hook/worker_walls_payload.py``, armed through a
``sitecustomize`` as in test_worker_boundary.py) runs in worker 0 once its
walls are up, where model code would run, and tries what test_walls.py tries
in the loader of ``fwx export``: read a secret in HOME and its parent's and the
supervisor's ``/proc/<pid>/environ``, write HOME and ``/dev/shm``, send UDP and
connect over TCP to listeners on 127.0.0.1, connect to a pathname unix socket
(on Landlock ABI 7, which does not cover those, the seccomp filter refuses the
socket itself: EACCES), allocate 10 GB. The host checks its side (nothing
received, no file written, no secret printed) and the healthy model keeps
answering throughout. The same runs as under Docker's default seccomp profile
(no namespaces): the worker still starts and ``GET /v2`` names the missing
wall; ``--require-sandbox`` then refuses to serve.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fwx.safety import landlock, limits, seccomp
from fwx.serving.spawn import worker_env

from .test_walls import SECRET, Host
from .test_worker_boundary import _free_port, _publish

#: The tests that start a server: they need Landlock's TCP rules (ABI 4) and signal scoping (ABI 6).
served_tests = pytest.mark.skipif(landlock.abi_version() < 6, reason="needs Landlock with TCP rules and signal scoping")
ROOT = Path(__file__).resolve().parents[2]
HOOK = Path(__file__).parent / "walls_hook"
PREFIX = "FWX-WALLS-WORKER "
BODY = {"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [4.0]}]}


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


class Served:
    """One ``fwx serve`` of a healthy model, started with the secrets a host would hold in its environment."""

    def __init__(self, host: Host, *args: str, cfg: dict[str, Any] | None = None, like_docker: bool = False) -> None:
        repo = host.base / "repo"
        if not repo.exists():
            _publish(repo, "good")
        self.port = _free_port()
        self.log = host.base / f"serve-{self.port}.log"
        env = {
            **os.environ,
            "PYTHONPATH": f"{HOOK}:{ROOT}",
            "PYTHONUNBUFFERED": "1",
            "HOME": str(host.home),
            "FWX_SERVE_TOKEN": SECRET,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "MY_API_KEY": SECRET,
            "FWX_TEST_LIKE_DOCKER": "1" if like_docker else "",
            "FWX_TEST_WALLS_CFG": json.dumps(cfg) if cfg is not None else "",
        }
        cmd = [sys.executable, "-m", "fwx", "serve", str(repo), "--http-port", str(self.port), "--grpc-port", "-1"]
        cmd += ["--workers", "1", "--poll-seconds", "0", *args]
        with self.log.open("w") as fh:
            self.proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=host.home)
        self.url = f"http://127.0.0.1:{self.port}"

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/v2/health/ready", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def infer(self) -> tuple[int, Any]:
        r = httpx.post(f"{self.url}/v2/models/good/infer", json=BODY, timeout=30)
        return r.status_code, r.json()["outputs"][0]["data"] if r.status_code == 200 else r.text

    def payload(self) -> dict[str, Any]:
        lines = [ln for ln in self.text().splitlines() if ln.startswith(PREFIX)]
        return dict(json.loads(lines[-1][len(PREFIX) :])) if lines else {}

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    h = Host(tmp_path)
    yield h
    h.close()


@contextlib.contextmanager
def _serving(host: Host, *args: str, like_docker: bool = False) -> Iterator[tuple[Served, dict[str, Any]]]:
    """A server whose worker ran the payload; yields it and the payload's record once the model answers."""
    served = Served(host, *args, cfg=host.config(""), like_docker=like_docker)
    try:
        _wait(lambda: served.proc.poll() is not None or served.ready(), 240, "the server to be ready")
        assert served.proc.poll() is None, served.text()[-3000:]
        _wait(lambda: bool(served.payload()) or served.proc.poll() is not None, 120, "the payload's record")
        yield served, served.payload()
    finally:
        code = served.stop()
    assert code == 0, served.text()[-3000:]


#: Refused by the kernel with EACCES (13): Landlock for files and TCP, the seccomp filter for UDP and unix.
REFUSED = {"read_home", "write_home", "udp", "tcp", "unix"}


def _held(host: Host, served: Served, got: dict[str, Any]) -> None:
    """Both sides: every attempt refused in the worker, nothing reached the host."""
    escaped = {k: got[k] for k in REFUSED if got[k] != "refused 13"}
    assert not escaped, (escaped, served.text()[-3000:])
    for name in ("read_parent_environ", "read_supervisor_environ"):  # EACCES, or no such process in its namespace
        assert got[name] in ("refused 13", "refused 2"), (name, got[name])
    assert got["allocate"] == "refused MemoryError", got["allocate"]
    assert host.received() == []
    assert not (host.home / "pwned").exists()
    assert not host.shm.exists(), "a file written in the worker's /dev/shm reached the host's"
    assert SECRET not in served.text() + got["self_environ"] + json.dumps(got["environ"])
    assert got["environ"].get("HOME") != str(host.home)


@pytest.mark.slow
@served_tests
@pytest.mark.parametrize("trust", [False, True], ids=["untrusted", "trust-model-code"])
def test_nothing_gets_out_of_a_serve_worker(host: Host, trust: bool) -> None:
    with _serving(host, *(["--trust-model-code"] if trust else [])) as (served, got):
        assert served.infer() == (200, [9.0])  # after the payload's 10 GB attempt: the worker still serves
        walls = httpx.get(f"{served.url}/v2", timeout=5).json()["walls"]
    _held(host, served, got)
    assert walls["on"] is True, walls
    assert walls["walls"]["memory"]["detail"] == limits.size_text(limits.default_memory())
    assert walls["walls"]["network"]["detail"].startswith("serves its own TCP ports only")
    assert got["ppid"] == 0  # its parent is outside its PID namespace: the host's process table is out of view


@pytest.mark.slow
@served_tests
def test_without_namespaces_a_worker_still_serves_and_names_the_missing_wall(host: Host) -> None:
    """As under Docker's default seccomp profile: no namespaces; the other walls hold, GET /v2 names the one
    missing, and --require-sandbox refuses to serve (one line, exit 2)."""
    with _serving(host, like_docker=True) as (served, got):
        assert served.infer() == (200, [9.0])
        walls = httpx.get(f"{served.url}/v2", timeout=5).json()["walls"]
    _held(host, served, got)
    assert got["write_shm"] == "refused 13"  # the host's /dev/shm: Landlock refuses it
    assert walls["missing"] == ["proc"], walls
    assert "unshare" in walls["walls"]["proc"]["detail"]
    strict = Served(host, "--require-sandbox", like_docker=True)
    assert strict.proc.wait(timeout=240) == 2, strict.text()[-3000:]
    text = strict.text()
    assert "missing walls: proc" in text, text[-3000:]
    assert "Traceback" not in text


@pytest.mark.slow
@served_tests
def test_no_sandbox_takes_the_walls_down_and_says_so(host: Host) -> None:
    served = Served(host, "--no-sandbox", cfg={**host.config(""), "allocate": False})
    try:
        _wait(lambda: served.proc.poll() is not None or served.ready(), 240, "the server to be ready")
        _wait(lambda: bool(served.payload()), 120, "the payload's record")
        walls = httpx.get(f"{served.url}/v2", timeout=5).json()["walls"]
    finally:
        served.stop()
    got = served.payload()
    assert walls["on"] is False
    assert set(walls["missing"]) >= {"landlock", "network", "proc", "memory"}
    assert "every wall down" in served.text()
    assert got["read_home"] == "DONE " + SECRET  # the attempts are real: without the walls they succeed
    assert got["udp"].startswith("DONE")
    contradiction = Served(host, "--no-sandbox", "--require-sandbox")
    assert contradiction.proc.wait(timeout=120) == 2
    assert "contradict" in contradiction.text()


def test_workers_get_the_loaders_environment_plus_the_replica_name() -> None:
    """One allow-list (``walls.clean_environment``): no token by any name, no HOME, no relative PYTHONPATH."""
    env = worker_env(
        1,
        {
            "POD_NAME": "pod-1",
            "HOSTNAME": "host-1",
            "FWX_REPLICA": "r-7",
            "USER": "svc",
            "HOME": "/root",
            "SSH_AUTH_SOCK": "/tmp/agent",
            "FWX_API_TOKEN": "a",
            "FWX_SERVE_TOKEN": "b",
            "GITHUB_TOKEN": "c",
            "AWS_SECRET_ACCESS_KEY": "d",
            "PYTHONPATH": ":/a:rel:/b",
        },
    )
    assert env == {
        "POD_NAME": "pod-1",
        "HOSTNAME": "host-1",
        "FWX_REPLICA": "r-7",
        "USER": "svc",
        "PYTHONPATH": "/a:/b",
    }


FILTER_CHECK = """
import json, socket
from fwx.safety import seccomp
seccomp.tcp_only()
out = {}
for name, args in {
    "tcp4": (socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC),
    "tcp6": (socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP),
    "udp4": (socket.AF_INET, socket.SOCK_DGRAM),
    "udp6": (socket.AF_INET6, socket.SOCK_DGRAM),
    "unix": (socket.AF_UNIX, socket.SOCK_STREAM),
    "netlink": (socket.AF_NETLINK, socket.SOCK_RAW, 0),
    "sctp": (socket.AF_INET, socket.SOCK_STREAM, 132),
    "mptcp": (socket.AF_INET, socket.SOCK_STREAM, 262),
}.items():
    try:
        socket.socket(*args).close()
        out[name] = "made"
    except OSError as exc:
        out[name] = exc.errno
a, b = socket.socketpair()
out["socketpair"] = "made"
print(json.dumps(out))
"""


@pytest.mark.skipif(not seccomp.supported(), reason="no seccomp filter for this machine")
def test_a_workers_filter_lets_it_make_tcp_sockets_only() -> None:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", FILTER_CHECK], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got == {
        "tcp4": "made",
        "tcp6": "made",
        "udp4": 13,
        "udp6": 13,
        "unix": 13,
        "netlink": 13,
        "sctp": 13,
        "mptcp": 13,
        "socketpair": "made",
    }


def _publish_expand_bomb(repo: Path) -> None:
    """A 200-byte ONNX graph whose warm-up expands one value into 2 GiB."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from fwx.manifest import ArtifactEntry, Manifest, SourceInfo, sha256_path
    from fwx.repository import Repository
    from fwx.signature import Signature, TensorSpec

    sig = Signature((TensorSpec("x", "float32", (-1, 1)),), (TensorSpec("y", "float32", (-1, 1)),))
    shape = numpy_helper.from_array(np.array([1, 1 << 29], np.int64), "shape")
    nodes = [
        helper.make_node("Expand", ["x", "shape"], ["big"]),
        helper.make_node("ReduceMax", ["big"], ["y"], axes=[1], keepdims=1),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1])
    model = helper.make_model(
        helper.make_graph(nodes, "bomb", [x], [y], [shape]), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    with Repository(repo).staging("bomb", None) as st:
        onnx.save(model, str(st.path / "model.onnx"))
        art = st.path / "model.onnx"
        entry = ArtifactEntry(
            format="onnx",
            path="model.onnx",
            sha256=sha256_path(art),
            size_bytes=art.stat().st_size,
            signature=sig.to_json(),
        )
        source = SourceInfo(path="(built in test)", sha256="", format="onnx", framework="onnx")
        st.publish(Manifest(name="bomb", version=0, source=source, signature=sig.to_json(), artifacts={"m": entry}))


@pytest.mark.slow
@served_tests
def test_a_memory_bomb_fails_its_version_naming_the_limit_and_the_rest_serves(host: Host) -> None:
    _publish(host.base / "repo", "good")
    _publish_expand_bomb(host.base / "repo")
    served = Served(host, "--memory-limit", "1GiB")
    try:
        _wait(
            lambda: served.proc.poll() is not None or served.ready() or "bomb v1 failed" in served.text(), 240, "loads"
        )
        _wait(lambda: httpx.get(f"{served.url}/v2/models/good/ready", timeout=5).status_code == 200, 240, "good")
        rows = {r["name"]: r for r in httpx.post(f"{served.url}/v2/repository/index", json={}, timeout=10).json()}
        assert served.infer() == (200, [9.0])
    finally:
        assert served.stop() == 0, served.text()[-3000:]
    assert rows["bomb"]["state"] == "FAILED"
    assert rows["bomb"]["reason"].endswith("(over this worker's memory limit, 1GiB: raise --memory-limit)"), rows
