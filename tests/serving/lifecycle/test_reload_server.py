"""Hot reload through a real ``fwx serve --workers 2``: v2 becomes routable, a broken v3 ends FAILED.

Behaviour only (timings are never pass/fail; ``benchmarks/reload.py`` measures them).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from lifecycle_helpers import Client, ServerProcess, publish, y_of


def _wait(cond: Callable[[], bool], timeout: float = 120.0, what: str = "") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _spares(pid: int) -> list[int]:
    """Spare probe children anywhere under ``pid`` (they wait with ``--spare`` on their command line)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if b"--spare" in cmd and b"fwx.serving.loader_probe" in cmd and _descends(ppid, pid):
            found.append(int(proc.name))
    return found


def _descends(ppid: int, root: int) -> bool:
    while ppid > 1:
        if ppid == root:
            return True
        try:
            ppid = int(Path(f"/proc/{ppid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            return False
    return False


def _infer(port: int) -> tuple[int, str, float]:
    """A version-less inference on a new connection (SO_REUSEPORT spreads those over the workers)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        body = {"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [4.0]}]}
        conn.request("POST", "/v2/models/lin/infer", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        doc = json.loads(resp.read() or b"{}")
        if resp.status != 200:
            return resp.status, "", 0.0
        return resp.status, str(doc["model_version"]), y_of(doc)
    finally:
        conn.close()


def _states(port: int) -> dict[str, str]:
    status, rows = Client(port).post("/v2/repository/index", {})
    assert status == 200
    return {r["version"]: r["state"] for r in rows if r["name"] == "lin"}  # type: ignore[union-attr]


def _every_worker_says(port: int, want: dict[str, str], asks: int = 12) -> bool:
    """Each worker keeps its own table and a new connection lands on any of them: ask several times."""
    return all(_states(port) == want for _ in range(asks))


@pytest.mark.slow
def test_reload_while_serving_then_a_broken_version(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    publish(repo, "lin", 1)
    server = ServerProcess(repo, tmp_path / "serve.log", "--workers", "2", "--poll-seconds", "0.2")
    answers: list[tuple[int, str, float]] = []
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            answers.append(_infer(server.http_port))
            time.sleep(0.01)

    thread = threading.Thread(target=client)
    try:
        server.wait_ready(120)
        _wait(lambda: len(_spares(server.pid)) == 2, what="one spare probe child per worker")
        thread.start()
        _wait(lambda: len(answers) >= 5, what="answers from v1")
        publish(repo, "lin", 2)
        _wait(lambda: [v for _, v, _ in answers[-20:]] == ["2"] * 20, what="20 answers in a row from v2")
        _wait(lambda: _every_worker_says(server.http_port, {"1": "UNAVAILABLE", "2": "READY"}), what="v2 READY")
        publish(repo, "lin", 3, kind="tflite_crash")
        _wait(lambda: _states(server.http_port).get("3") == "FAILED", what="v3 FAILED")
        n = len(answers)
        _wait(lambda: len(answers) >= n + 10, what="more answers")
        stop.set()
        thread.join(30)
        want = {"1": "UNAVAILABLE", "2": "READY", "3": "FAILED"}
        _wait(lambda: _every_worker_says(server.http_port, want), what="v3 FAILED in every worker")
        spares = _spares(server.pid)
        assert spares, "spares are back after the reload"
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(30)
        server.stop()
    assert server.proc.returncode == 0
    assert all(not Path(f"/proc/{pid}").exists() for pid in spares), "the spares stop with the server"
    assert all(status == 200 for status, _, _ in answers), "no request failed during the reloads"
    assert {v for _, v, _ in answers} == {"1", "2"}
    assert all(y == 8.0 + int(v) for _, v, y in answers), "every answer came from the version that claims it"
    first_v2 = next(i for i, (_, v, _) in enumerate(answers) if v == "2")
    assert all(v == "1" for _, v, _ in answers[:first_v2])
    loaded = [ln for ln in server.log().splitlines() if "model lin v2 loaded as" in ln]
    assert len(loaded) == 2, "each worker loads v2 itself"
    assert any("probe" in ln for ln in loaded), "a hot reload is probed (once: the verdict is shared)"


@pytest.mark.slow
def test_no_probe_spare_keeps_no_spare_and_still_reloads(tmp_path: Path) -> None:
    """``--no-probe-spare``: no idle child; a reload probes in a fresh child and still swaps in."""
    repo = tmp_path / "repo"
    publish(repo, "lin", 1)
    server = ServerProcess(repo, tmp_path / "serve.log", "--poll-seconds", "0.2", "--no-probe-spare")
    seen: set[int] = set()
    stop = threading.Event()

    def watch() -> None:  # the whole life of the server, not a fixed pause: any spare at any moment is seen
        while not stop.is_set():
            seen.update(_spares(server.pid))
            stop.wait(0.02)

    watcher = threading.Thread(target=watch)
    try:
        server.wait_ready(120)
        watcher.start()
        publish(repo, "lin", 2)
        _wait(lambda: _infer(server.http_port)[1] == "2", what="v2 answers")
    finally:
        server.stop()
        stop.set()
        if watcher.is_alive():
            watcher.join(30)
    assert seen == set(), "no spare probe child ever ran"
    assert "probe" in next(ln for ln in server.log().splitlines() if "model lin v2 loaded as" in ln)
