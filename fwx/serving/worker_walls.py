"""The walls a worker of ``fwx serve`` takes before it imports numpy or a framework, trusted model or not.

The same walls as the loader of ``fwx export`` (``fwx.safety.walls``), in the
same order: namespaces (a private ``/dev/shm`` and ``/proc``, the host's
network: it serves on it), capabilities dropped, a seccomp filter that lets it
create TCP sockets only, a memory limit, then Landlock (read the repository and
the run folder, write its own slot, bind its own ports, connect nowhere).
``--trust-model-code`` only lets model code run; ``--no-sandbox`` alone takes
the walls down. The report it returns is what ``GET /v2`` lists.

There is no CPU-time limit: a server accumulates CPU for as long as it runs,
so any limit would one day stop a healthy worker. A load that never ends is
killed by the supervisor after the probe timeout instead, and requests have
their deadlines.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from fwx.safety import limits, walls
from fwx.serving.runstate import RunState

#: Beyond its drain, how long a worker whose supervisor is gone may take to end before it is killed.
ORPHAN_MARGIN_S = 10.0


def wanted(config: Any) -> walls.Walls:
    """The walls ``config`` (a ServerConfig) asks of each worker."""
    from fwx.safety.sandbox import required
    from fwx.serving.loader_probe import DEFAULT_TIMEOUT_S

    ports = [p for p in (config.http_port, config.grpc_port) if p > 0]
    return walls.Walls(
        limits=limits.Limits(getattr(config, "memory_limit", limits.default_memory()), None),
        require=required(bool(config.require_sandbox)),
        enabled=not getattr(config, "no_sandbox", False),
        network=False,
        privileged_port=any(p < 1024 for p in ports),
        load_timeout_s=float(getattr(config, "probe_timeout_s", DEFAULT_TIMEOUT_S)),
        # its drain, and a margin for the shutdown delay's and the drain's own bookkeeping
        orphan_drain_s=float(config.shutdown_delay_s) + float(config.drain_seconds) + ORPHAN_MARGIN_S,
    )


def policy(config: Any, run_root: Path, slot: int, *, shm: bool = True) -> Any:
    """What a worker may touch: read its repository and the run folder, write its own slot's folder only
    (not its peers', not the supervisor's records), bind its own ports."""
    from fwx.safety.sandbox import Policy

    ports = tuple(p for p in (config.http_port, config.grpc_port) if p > 0)
    root = Path(run_root).resolve()
    return Policy(
        read=(Path(config.repository).resolve(), root),
        write=(RunState.slot_dir_of(root, slot),),
        bind_ports=ports,
        gpu=str(config.device).startswith("cuda"),
        shm=shm,
    )


def enter(config: Any, run_root: Path, slot: int) -> walls.WallsReport:
    """Take every wall (single-threaded callers only: this forks into the PID namespace, and only the child
    returns; the parent stays behind and ends as the child ends)."""
    from fwx.safety import sandbox

    want = wanted(config)
    if not want.enabled:
        return walls.down("--no-sandbox")
    iso = walls.enter(want)
    # The scratch folder goes in this worker's slot folder, which the supervisor empties for each worker and
    # removes at the end: Landlock keeps a worker from removing its own entry in the shared temp folder.
    tempfile.tempdir = str(RunState.slot_dir_of(Path(run_root).resolve(), slot))
    # (a kernel without Landlock was reported once by the supervisor: fwx.commands.serve)
    sandbox.enter(policy(config, run_root, slot, shm=iso.shm), require=want.require, what=f"worker {slot}", warn=False)
    report = walls.finish(iso, want, sandbox.status.abi, sandbox.status.reason, what=f"worker {slot}")
    if sandbox.status.on:
        os.environ["HOME"] = str(sandbox.scratch_dir())  # the user's home is out of reach: caches land here
    return report
