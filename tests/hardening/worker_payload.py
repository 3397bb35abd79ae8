"""Hostile code inside ``fwx serve``'s worker 0, once its sandbox is on (test only).

Installed by a ``sitecustomize`` on the test server's PYTHONPATH: in the
worker the test arms (``FWX_TEST_PAYLOAD_SLOT``), a thread starts once the
worker has restricted itself and dropped its capabilities (when it sets up its
logging, before it loads a model), waits until every worker is ready, and
tries to reach past its own slot. It prints one ``FWX-PAYLOAD <attempt> <outcome>`` line per attempt; the
test reads them from the server's log.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

PREFIX = "FWX-PAYLOAD"


def report(attempt: str, outcome: str) -> None:
    print(f"{PREFIX} {attempt} {outcome}", file=sys.stderr, flush=True)


def _try(attempt: str, action: Any) -> None:
    try:
        result = action()
    except PermissionError:
        report(attempt, "denied")
    except OSError as exc:
        report(attempt, f"error-{exc.errno}")
    else:
        report(attempt, f"done:{result!s}"[:300])


def _read(path: Path) -> str:
    return path.read_bytes().decode(errors="replace")


def _write(path: Path, data: bytes) -> str:
    with open(path, "wb") as fh:  # noqa: PTH123 - the plain open(2) a payload would use
        fh.write(data)
    return "written"


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _peers(sup: int) -> list[int]:
    """The supervisor's other children; in a PID namespace of its own the worker sees none of them, so it
    aims at the pids after the supervisor's (host pids it cannot name: each kill finds no such process)."""
    try:
        return [p for p in _children(sup) if p != os.getpid()]
    except OSError:
        return list(range(sup + 1, sup + 64))


def run(root: Path, repository: Path, slot: int, token: str, start_dir: str, sup: int) -> None:
    own, peer = root / f"w{slot}", root / f"w{1 - slot}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and (root / "board").read_bytes()[:1] != b"\1":
        time.sleep(0.05)  # the attacker waits for the server to be up; the test waits on conditions
    _try("read-start-dir", lambda: _read(Path(start_dir) / ".ssh" / "id_rsa"))
    try:
        cmdline = (Path(f"/proc/{sup}") / "cmdline").read_bytes()
        report("supervisor-cmdline-token", "found" if token.encode() in cmdline else "absent")
    except OSError:
        report("supervisor-cmdline-token", "unreachable")  # not in this worker's PID namespace
    _try("supervisor-environ", lambda: "found" if token in _read(Path(f"/proc/{sup}/environ")) else "absent")
    report("own-environ-token", "found" if token.encode() in Path("/proc/self/environ").read_bytes() else "absent")
    report("os-environ-token", "found" if token in "".join(os.environ.values()) else "absent")
    _try("forge-peer-loading", lambda: _write(peer / "loading", json.dumps({"key": "x", "since": 0}).encode()))
    _try("forge-quarantine", lambda: _write(root / "quarantine.json", b'{"0": {"k": "forged reason"}}'))
    _try("forge-board", lambda: _write(root / "board", b"\1"))
    _try("forge-probe-mark", lambda: (root / "probed").mkdir())
    _try("forge-dead-metrics", lambda: _write(root / "dead" / "1.prom", b"fwx_request_success_total 1e9\n"))
    peers = _peers(sup)
    _try("kill-peer", lambda: _kill_any(peers))
    _try("kill-supervisor", lambda: os.kill(sup, signal.SIGTERM))
    # its own slot: malformed records, which the supervisor and the peers must shrug off
    _try("own-malformed-loading", lambda: _write(own / "loading", b'{"key": "k", "since": "not-a-number"}'))
    time.sleep(3.0)  # give the supervisor's 20 ms tick time to read it (an attacker's choice, not a sync)
    with contextlib.suppress(OSError):
        (own / "loading").unlink()
    _try("own-garbage-metrics", lambda: _write(own / "metrics.prom", b"\xff\xfe{{{ not prometheus\n" * 1000))
    report("end", "ok")
    if not any((root / "dead").iterdir()):  # once per run: the restarted worker runs this payload again
        _die_blaming(own, repository)


def _kill_any(pids: list[int]) -> str:
    """SIGKILL each; the first refusal is the outcome (EPERM: denied; ESRCH: no such process here)."""
    first: OSError | None = None
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError as exc:
            first = first or exc
        else:
            return f"killed {pid}"
    if first is not None:
        raise first
    return "nobody"


def _die_blaming(own: Path, repository: Path) -> None:
    """Name a healthy artifact in its own loading mark and die, hoping the supervisor quarantines it."""
    from fwx.formats import Format
    from fwx.serving.runstate import artifact_key

    healthy = next(repository.glob("*/*/model.onnx"))
    mark = json.dumps({"key": artifact_key(Format.ONNX, healthy), "seq": 1}).encode()
    _write(own / "loading", mark)
    report("die-blaming", str(healthy.parent.parent.name))
    os.kill(os.getpid(), signal.SIGKILL)


def install() -> None:
    """Arm the worker the test names (called from the test's sitecustomize): the payload starts when the
    worker sets up its logging, right after its sandbox and its capability drop, as model code would."""
    armed = os.environ.get("FWX_TEST_PAYLOAD_SLOT")
    if armed is None:
        return
    import fwx.safety.sandbox as sandbox
    import fwx.serving.logs as logs
    import fwx.serving.spawn as spawn

    enter_real, setup_real, read_job_real = sandbox.enter, logs.setup_logging, spawn.read_job
    start_dir = os.getcwd()
    seen: dict[str, Any] = {}

    def read_job() -> Any:
        job = read_job_real()
        if job is not None:
            seen["supervisor"] = job.supervisor_pid  # the job names it: getppid() is 0 in a PID namespace
        return job

    def enter(policy: Any, **kw: Any) -> Any:
        if kw.get("what") == f"worker {armed}":
            seen["root"], seen["repository"] = Path(policy.write[0]).parent, Path(policy.read[0])
        return enter_real(policy, **kw)

    def setup_logging(level: str, tag: str = "", **kw: Any) -> Any:
        done = setup_real(level, tag, **kw)
        if tag == f"w{armed}" and seen:
            # never the token's own bytes (a name holding TOKEN would be scrubbed from the worker's environment)
            token = os.environ["FWX_TEST_REVERSED_WORD"][::-1]
            args = (seen["root"], seen["repository"], int(armed), token, start_dir, seen["supervisor"])
            threading.Thread(target=run, args=args, daemon=True).start()
        return done

    sandbox.enter = enter
    logs.setup_logging = setup_logging
    spawn.read_job = read_job
