"""``fwx serve --workers N``: N processes on shared ports under one supervisor that loads no model."""

from __future__ import annotations

import http.client
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from lifecycle_helpers import Client, ServerProcess, publish, y_of

from fwx.errors import UsageError
from fwx.serving.config import ServerConfig
from fwx.serving.metrics_merge import merge
from fwx.serving.runstate import RunState
from fwx.serving.spawn import Spawner, parse_workers
from fwx.serving.supervisor import Supervisor
from fwx.serving.workers import Publisher

LIN = 'fwx_request_success_total{model="lin",version="1"}'


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return sorted(int(p) for p in text.split())


def _wait(cond: Callable[[], bool], timeout: float = 60.0, what: str = "") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what or cond}")


def _ready(port: int) -> int | None:
    try:
        return Client(port, timeout=2).get("/v2/health/ready")[0]
    except OSError:
        return None


def _metric(text: str, name: str) -> float | None:
    m = re.search(re.escape(name) + r" ([0-9.e+]+)", text)
    return float(m.group(1)) if m else None


def _grpc_ready_and_infer(port: int) -> tuple[bool, float]:
    import grpc
    import numpy as np

    from fwx.serving.proto import grpc_service_pb2 as pb
    from fwx.serving.proto import grpc_service_pb2_grpc as pb_grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        ready = stub.ServerReady(pb.ServerReadyRequest(), timeout=10).ready
        req = pb.ModelInferRequest(model_name="lin")
        req.inputs.add(name="x", datatype="FP32", shape=[1, 1])
        req.raw_input_contents.append(np.array([[4.0]], np.float32).tobytes())
        out = stub.ModelInfer(req, timeout=10)
    return bool(ready), float(np.frombuffer(out.raw_output_contents[0], np.float32)[0])


def _rundir(tmp: Path) -> Path:
    found = list(tmp.glob("fwx-serve-*"))
    assert len(found) == 1, found
    return found[0]


@pytest.fixture
def run_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The supervisor's run directory lands here (it uses TMPDIR), so a test can look inside."""
    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.setenv("TMPDIR", str(run))
    return run


def test_parse_workers() -> None:
    assert parse_workers("3") == 3
    assert parse_workers("auto") == len(os.sched_getaffinity(0))
    for bad in ("0", "-2", "many"):
        with pytest.raises(UsageError):
            parse_workers(bad)


def test_merge_adds_counters_keeps_dead_counters_and_drops_dead_gauges() -> None:
    a = (
        b'# TYPE fwx_request_success counter\nfwx_request_success_total{model="m"} 3.0\n'
        b"# TYPE fwx_server_ready gauge\nfwx_server_ready 1.0\n"
        b'# TYPE fwx_queue_depth gauge\nfwx_queue_depth{model="m"} 2.0\n'
    )
    b = a.replace(b"3.0", b"4.0").replace(b"ready 1.0", b"ready 0.0")
    text = merge([(a, True), (b, True), (a, False)]).decode()
    assert 'fwx_request_success_total{model="m"} 10.0' in text
    assert "fwx_server_ready 0.0" in text  # min: ready only if every worker is
    assert 'fwx_queue_depth{model="m"} 4.0' in text  # the dead worker's gauge is gone


def test_merged_walls_are_up_only_where_every_worker_has_them() -> None:
    a = (
        b'# TYPE fwx_sandbox_enabled gauge\nfwx_sandbox_enabled{landlock_abi="7"} 1.0\n'
        b'# TYPE fwx_wall_up gauge\nfwx_wall_up{wall="landlock"} 1.0\nfwx_wall_up{wall="seccomp"} 1.0\n'
    )
    b = a.replace(b'seccomp"} 1.0', b'seccomp"} 0.0')
    text = merge([(a, True), (a, True), (b, True)]).decode()
    assert 'fwx_sandbox_enabled{landlock_abi="7"} 1.0' in text  # not 3.0: three sandboxed workers
    assert 'fwx_wall_up{wall="landlock"} 1.0' in text
    assert 'fwx_wall_up{wall="seccomp"} 0.0' in text  # one worker without it is enough to say it is down


def test_a_worker_publishes_its_readiness_and_wakes_the_supervisor_only_on_a_change(tmp_path: Path) -> None:
    state = RunState.create(tmp_path, 2)
    one, zero = RunState.open(tmp_path, 2, 1), RunState.open(tmp_path, 2, 0)
    r, w = os.pipe()
    os.set_blocking(r, False)
    try:
        publish = Publisher(one, 1, w)
        publish(False)
        publish(True)
        publish(True)  # every tick republishes: no wake-up without a change
        assert state.worker_ready(1)
        assert not state.worker_ready(0)
        publish(False)
        assert not state.worker_ready(1)
        assert os.read(r, 100) == b"rrr"  # False (first), True, False
        Publisher(zero, 0, None)(True)  # no pipe (a lone test server): the board still gets it
        assert state.worker_ready(0)
    finally:
        for s in (state, one, zero):
            s.close()
        os.close(r)
        os.close(w)


def test_the_supervisor_wakes_on_the_pipe_instead_of_sleeping_a_tick(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    sup = Supervisor(ServerConfig(repository=repo), run)
    try:
        os.write(sup.spawner.wake_w, b"rr")
        sup._wait(3600.0)  # returns on the byte; a wait that slept its tick would hang to pytest's timeout
        with pytest.raises(BlockingIOError):
            os.read(sup.spawner.wake_r, 1)  # drained: the next wait sleeps again
    finally:
        sup.close()


def _processes_with(marker: str) -> list[int]:
    """Live processes whose environment holds ``marker`` (the workers a test's fwx serve started)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            try:
                if marker.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_a_worker_that_gets_no_job_exits_0_quietly() -> None:
    """The supervisor closes an early worker's stdin unused (a check failed): it must not start serving."""
    spawner = Spawner(dict(os.environ))
    try:
        proc = spawner.start()
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(120) == 0
    finally:
        spawner.close()


@pytest.mark.parametrize("workers", ["1", "3"])
def test_a_usage_error_after_the_early_workers_started_leaves_no_process_behind(tmp_path: Path, workers: str) -> None:
    repo = tmp_path / "empty"
    repo.mkdir()
    marker = f"FWX_TEST_MARK={uuid.uuid4().hex}"
    env = {**os.environ, marker.split("=")[0]: marker.split("=")[1]}
    done = subprocess.run(
        [sys.executable, "-m", "fwx", "serve", str(repo), "--http-port", "0", "--grpc-port", "0", "--workers", workers],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "holds no model" in done.stderr
    assert "Traceback" not in done.stderr
    assert _processes_with(marker) == []


@pytest.mark.e2e
@pytest.mark.slow
def test_two_workers_serve_restart_aggregate_and_drain(tmp_path: Path, run_tmp: Path) -> None:
    repo = tmp_path / "repo"
    publish(repo, "lin", 1)
    publish(repo, "slow", 1, slow_ops=40, per_row=True, slow_dim=4096)
    server = ServerProcess(
        repo,
        tmp_path / "serve.log",
        "--workers",
        "2",
        "--poll-seconds",
        "0",
        "--drain-seconds",
        "300",  # a deadline, not an expectation: under load six slow requests can take well over 20 s
        "--max-batch-size",
        "1",
        grpc=True,
    )
    try:
        server.wait_ready(120)
        workers = _children(server.pid)
        assert len(workers) == 2
        assert _grpc_ready_and_infer(server.grpc_port) == (True, 9.0)  # gRPC shares its port the same way
        for i in range(40):  # a fresh connection each: the kernel spreads them over both workers
            status, body = Client(server.http_port).infer(float(i))
            assert status == 200
            assert y_of(body) == 2 * i + 1
        # every worker served some, and any worker's /metrics counts all 41 (snapshots are <= 1 s old)
        run = _rundir(run_tmp)
        _wait(
            lambda: all((_metric((run / f"w{i}" / "metrics.prom").read_text(), LIN) or 0) > 0 for i in (0, 1)),
            120,
            "both workers to have served",
        )
        # both snapshot files hold every request before a worker is killed: a worker writes its own once a
        # second, so one killed sooner loses what it served since (a loaded run lost 10 of 41 that way)
        _wait(
            lambda: sum(_metric((run / f"w{i}" / "metrics.prom").read_text(), LIN) or 0 for i in (0, 1)) == 41,
            120,
            "both workers' snapshots to hold all 41 requests",
        )
        _wait(
            lambda: all(_metric(Client(server.http_port).get("/metrics")[1].decode(), LIN) == 41 for _ in range(6)),
            120,
            "aggregated metrics",
        )
        assert "probe" not in "".join(ln for ln in server.log().splitlines() if "loaded as" in ln)

        # a dead worker is restarted; readiness drops meanwhile and comes back; counters do not drop
        os.kill(workers[0], signal.SIGKILL)
        _wait(lambda: _ready(server.http_port) == 503, 60, "the surviving worker to say not ready (503: retry)")
        _wait(lambda: _ready(server.http_port) == 200, 120, "readiness to come back")
        after = _children(server.pid)
        assert len(after) == 2
        assert workers[0] not in after
        assert workers[1] in after
        assert _metric(Client(server.http_port).get("/metrics")[1].decode(), LIN) == 41

        # SIGTERM drains both workers: requests in flight on either are answered, then exit 0
        results: list[int] = []

        def call() -> None:
            results.append(Client(server.http_port).infer(1.0, model="slow")[0])

        threads = [threading.Thread(target=call) for _ in range(6)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        os.kill(server.pid, signal.SIGTERM)
        for t in threads:
            t.join(300)
        code = server.proc.wait(300)
    finally:
        server.stop()
    assert results == [200] * 6, server.log()[-3000:]
    assert code == 0
    assert not any(Path(f"/proc/{pid}").exists() for pid in after)
    assert list(run_tmp.iterdir()) == []  # the run folder, and the workers' scratch folders inside it


def _crash_hook(monkeypatch: pytest.MonkeyPatch, over: int) -> None:
    """Artifacts larger than ``over`` bytes crash whichever process loads them (crash_hook/sitecustomize.py)."""
    hook = Path(__file__).parent / "crash_hook"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.setenv("FWX_TEST_CRASH_OVER", str(over))


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("trust", [True, False])
def test_an_artifact_that_kills_its_loader_is_quarantined(
    tmp_path: Path, run_tmp: Path, monkeypatch: pytest.MonkeyPatch, trust: bool
) -> None:
    """A loader crash costs a worker restart, not the server: the supervisor's own trial crashes too, so the
    version is FAILED and the rest serves.

    Without --trust-model-code the worker loads a private copy; the quarantine still names the repository's
    artifact, so the restarted worker (another copy elsewhere) recognises it.
    """
    repo = tmp_path / "repo"
    publish(repo, "lin", 1)
    v2 = publish(repo, "lin", 2, slow_ops=60, slow_dim=512)  # larger than v1: the one that crashes
    _crash_hook(monkeypatch, (v2 / "model.onnx").stat().st_size - 1)
    trusted = ["--trust-model-code"] if trust else []
    server = ServerProcess(repo, tmp_path / "serve.log", "--poll-seconds", "0", "--version-policy", "all", *trusted)
    try:
        server.wait_ready(240)
        client = Client(server.http_port)
        assert y_of(client.infer(4.0, version="1")[1]) == 9.0
        rows = {r["version"]: r for r in client.post("/v2/repository/index", {})[1]}
    finally:
        code = server.stop()
    assert "probe" not in "".join(ln for ln in server.log().splitlines() if "loaded as" in ln)
    assert rows["1"]["state"] == "READY"
    assert rows["2"]["state"] == "FAILED"
    assert rows["2"]["reason"].startswith("onnx: loader crashed (SIGSEGV) on lin v2 model.onnx (onnx)")
    assert "trying that artifact in a trial of its own" in server.log()
    assert code == 0


@pytest.mark.e2e
@pytest.mark.slow
def test_a_worker_that_dies_loading_a_sound_artifact_gets_no_quarantine(tmp_path: Path, run_tmp: Path) -> None:
    """A worker's death while loading is its word, not proof (code inside it can fake one): the supervisor's
    trial loads the artifact cleanly, so nothing is quarantined and the restarted worker serves the version."""
    repo = tmp_path / "repo"
    publish(repo, "lin", 1)
    publish(repo, "lin", 2, slow_ops=60, slow_dim=512)  # a slow warm-up: time to kill it mid-load
    server = ServerProcess(repo, tmp_path / "serve.log", "--poll-seconds", "0", "--version-policy", "all")
    try:
        _wait(
            lambda: (
                bool(list(run_tmp.glob("fwx-serve-*/w0/loading")))
                and "/lin/2/" in next(run_tmp.glob("fwx-serve-*/w0/loading")).read_text(errors="replace")
            ),
            120,
            "the worker to load v2",
        )
        (victim,) = _children(server.pid)
        os.kill(victim, signal.SIGSEGV)  # a crash the artifact does not cause
        server.wait_ready(240)
        rows = {r["version"]: r for r in Client(server.http_port).post("/v2/repository/index", {})[1]}
    finally:
        code = server.stop()
    assert rows["2"]["state"] == "READY", rows
    assert "loads cleanly in a trial of its own: not quarantined" in server.log()
    assert code == 0


def _namespace_init(pid: int) -> bool:
    """PID 1 of its own PID namespace (it waits there until the host reaps the rest; it holds no socket)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return any(
        line.startswith("NSpid:") and line.split()[-1] == "1" and len(line.split()) > 2 for line in status.splitlines()
    )


def _answer(port: int, x: float) -> int | str:
    """One inference on a fresh connection (the kernel picks the worker): its status, or the connection error."""
    client = Client(port, timeout=60)
    try:
        return client.infer(x)[0]
    except (OSError, http.client.HTTPException) as exc:
        return repr(exc)
    finally:
        client.close()


def _dead(pid: int) -> bool:
    """Killed: reaped, or a zombie (its sockets are closed either way)."""
    try:
        return "State:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


@pytest.mark.e2e
@pytest.mark.slow
def test_a_restarted_worker_takes_no_traffic_before_its_models_are_ready(tmp_path: Path, run_tmp: Path) -> None:
    """kill -9 one of two workers under a steady request loop: no request may reach the replacement while it loads."""
    repo = tmp_path / "repo"
    publish(repo, "lin", 1)
    publish(repo, "slow", 1, slow_ops=60, slow_dim=512)  # a slow warm-up: a wide loading window
    server = ServerProcess(repo, tmp_path / "serve.log", "--workers", "2", "--poll-seconds", "0")
    answers: list[int | str] = []
    try:
        server.wait_ready(120)
        state = RunState(_rundir(run_tmp), 2)
        victim = _children(server.pid)[0]
        # the worker itself runs under the process the supervisor started (its namespaces' first fork) and
        # holds the listener: it dies of its parent-death signal a moment after that process, and a connection
        # the kernel queued on its listener meanwhile is reset with it (lost by design, not the replacement's)
        listeners = [p for p in _children(victim) if not _namespace_init(p)]  # its init holds no socket
        answers += [_answer(server.http_port, float(i)) for i in range(10)]
        os.kill(victim, signal.SIGKILL)
        for _ in range(100_000):  # the loop until the board shows the dead worker (bounded, no clock)
            gone = _dead(victim) and all(_dead(p) for p in listeners)
            if gone and not (state.worker_ready(0) and state.worker_ready(1)):
                break
        else:
            raise AssertionError("the killed worker never left the board")
        slot = 0 if not state.worker_ready(0) else 1
        for i in range(20_000):  # steady load while the replacement starts, loads and warms up
            answers.append(_answer(server.http_port, float(i)))
            if state.worker_ready(slot):
                break
        assert state.worker_ready(slot), "the replacement never became ready"
        metrics = _rundir(run_tmp) / f"w{slot}" / "metrics.prom"
        for i in range(5_000):  # and once ready it does listen: it serves its share
            answers.append(_answer(server.http_port, float(i)))
            if metrics.exists() and (_metric(metrics.read_text(), LIN) or 0) > 0:
                break
        served_by_replacement = _metric(metrics.read_text(), LIN) if metrics.exists() else None
        state.close()
    finally:
        server.stop()
    bad = [a for a in answers if a != 200]
    assert bad == [], f"{len(bad)} of {len(answers)} requests failed, e.g. {bad[:3]}"
    assert (served_by_replacement or 0) > 0


@pytest.mark.e2e
@pytest.mark.slow
def test_a_wedged_worker_is_killed_once_its_supervisor_is_gone(
    tmp_path: Path, run_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker stuck in one C call that holds the GIL (crash_hook/) runs no SIGTERM handler: when its
    supervisor is SIGKILLed, the process that stays outside its namespaces kills it after its drain."""
    _crash_hook(monkeypatch, 0)
    monkeypatch.setenv("FWX_TEST_WEDGE", "9")
    repo = tmp_path / "repo"
    publish(repo, "lin", 1)
    log = tmp_path / "serve.log"
    server = ServerProcess(repo, log, "--poll-seconds", "0", "--drain-seconds", "1", "--no-load-probe")
    try:
        _wait(lambda: "wedged" in server.log(), 120, "the worker to wedge")
        (outer,) = _children(server.pid)  # the process the supervisor started
        os.kill(server.pid, signal.SIGKILL)
        server.proc.wait()
        _wait(lambda: _dead(outer) and not _children_alive(outer), 120, "the orphaned, wedged worker to be killed")
    finally:
        server.stop()


def _children_alive(pid: int) -> bool:
    try:
        return any(not _dead(int(p)) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())
    except OSError:
        return False
