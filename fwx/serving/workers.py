"""One worker process of ``fwx serve --workers N``: a full server that shares its ports.

``python -m fwx.serving.workers`` imports the server (which needs no
configuration), then reads its job from stdin (``fwx.serving.spawn.Job``: run
directory, slot, the supervisor's pid and wake-up fd, the ServerConfig) and
runs the ordinary single-process server (``fwx.serving.server.run_server``)
with SO_REUSEPORT on both ports, plus four hooks:

* readiness: ``/v2/health/ready`` (and gRPC ServerReady, the health service and
  the ``fwx_server_ready`` gauge) says ready only when this worker is ready AND
  the supervisor's board says every worker is. The load balancer's probe lands
  on any one worker, so each must answer for all of them. A change of this
  worker's own readiness is published at once (the moment start-up ends, then
  on every tick) with a byte on the supervisor's wake-up pipe, so the pod is
  ready as soon as its last worker is, not one or two ticks later.
* crash-safe loading without a probe child: the first load of every model runs
  in-process (no second framework import, no second load), inside a guard that
  records the artifact being loaded in its own ``w<slot>/loading``. If the native loader
  kills the worker, the supervisor reads that file, quarantines the artifact and
  restarts the worker, which then refuses it ("loader crashed (SIGSEGV) ...") and
  falls back to the next format, as the probe did. Guarded loads run one at a time
  so a crash is blamed on exactly one artifact.
* no traffic before ready: a worker started while another one is ready (a
  restart) opens its listeners only after its models are loaded and warm, so
  the kernel never hands it a connection it would answer 503. At the first
  start no worker is ready yet, and each listens at once so liveness answers
  while the models load.
* walls: before it imports anything heavy, the worker takes every wall the
  loader of ``fwx export`` takes, with or without ``--trust-model-code``
  (``fwx.serving.worker_walls``); only ``--no-sandbox`` skips them.
* hot reloads after ready still probe in a child (a crash there would cut off
  serving); each worker probes for itself: a verdict one worker wrote would
  let a compromised worker wave a hostile version past its peers' probes.
* metrics: a snapshot of this worker's registry every second, and /metrics
  answers with every worker's figures merged (``fwx.serving.metrics_merge``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fwx.errors import InputError
from fwx.formats import Format
from fwx.serving import worker_walls  # imported while the worker waits for its job: nothing heavy, no thread
from fwx.serving.logs import setup_logging
from fwx.serving.runstate import RunState, artifact_key
from fwx.serving.spawn import read_job

log = logging.getLogger("fwx.serving")

#: How often a worker publishes its readiness and checks its supervisor is alive.
TICK_S = 0.02
#: How often a worker writes its metrics snapshot for the others to merge.
METRICS_EVERY_S = 1.0


class LoadGuard:
    """Wraps each in-process load + warm-up (``fwx.serving.loader.load_guard``) for the supervisor."""

    def __init__(self, state: RunState, slot: int) -> None:
        self.state = state
        self.slot = slot
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def __call__(self, fmt: Format, path: Path) -> Iterator[None]:
        key = artifact_key(fmt, path)
        reason = self.state.quarantined(key)
        if reason:
            raise InputError(reason, hint="the artifact is corrupt or hostile; re-export it")
        with self._lock:
            self.state.begin_load(key)
            try:
                yield
            finally:
                self.state.end_load()


class Publisher:
    """Writes this worker's readiness to the board and wakes the supervisor when it changes."""

    def __init__(self, state: RunState, slot: int, wake_fd: int | None) -> None:
        self.state = state
        self.slot = slot
        self.wake_fd = wake_fd
        self._last: bool | None = None

    def __call__(self, ready: bool) -> None:
        self.state.set_ready(ready)
        if ready != self._last:
            self._last = ready
            if self.wake_fd is not None:
                # a full pipe already holds a wake-up; a closed one means the supervisor is gone (the tick sees it)
                with contextlib.suppress(OSError):
                    os.write(self.wake_fd, b"r")


def install(server: Any, state: RunState, slot: int, supervisor_pid: int | None, wake_fd: int | None = None) -> None:
    """Hook one ``fwx.serving.server.Server`` into the supervisor's run (called before it starts)."""
    dp = server.dataplane
    manager = dp.manager
    # Peers already serve (this is a restart): they answer liveness and traffic, so this worker joins the
    # shared ports only when its models are ready; a connection it accepted earlier would get 503 LOADING.
    server.listen_after_load = any(state.worker_ready(i) for i in range(state.workers) if i != slot)
    manager.probe_first_loads = False  # ``LoadGuard`` and the supervisor make first loads crash-safe
    local_ready = dp.ready
    local_render = dp.metrics.render

    def ready() -> bool:
        mine = bool(local_ready())
        ok = mine and state.all_ready()
        dp.metrics.ready = ok
        dp.peers_not_ready = mine and not ok  # a peer (re)starts: REST readiness says 503, retry
        return ok

    def merged() -> Any:
        from fwx.serving.metrics_merge import merged_registry

        ready()  # refresh the gauge with the all-workers answer
        return merged_registry([(local_render(), True), *state.other_metrics()])

    def render() -> bytes:
        from prometheus_client import generate_latest

        return bytes(generate_latest(merged()))

    def negotiate(accept: str | None) -> tuple[bytes, str]:
        from fwx.serving.metrics import render_negotiated

        return render_negotiated(merged(), accept)

    dp.ready = ready  # type: ignore[method-assign]
    dp.metrics.render = render  # type: ignore[method-assign]
    dp.metrics.negotiate = negotiate  # type: ignore[method-assign]
    publish = Publisher(state, slot, wake_fd)
    start = server.start

    async def start_then_publish() -> None:
        await start()
        publish(bool(local_ready()))  # now, not at the next tick

    server.start = start_then_publish
    loop = asyncio.get_running_loop()
    server._fwx_worker_task = loop.create_task(
        _tick(local_ready, local_render, publish, slot, supervisor_pid, state), name="fwx-worker-tick"
    )


async def _tick(
    local_ready: Callable[[], bool],
    render: Callable[[], bytes],
    publish: Callable[[bool], None],
    slot: int,
    supervisor_pid: int | None,
    state: RunState,
) -> None:
    """Publish readiness and metrics; stop (SIGTERM to self) if the supervisor is gone (``None``: the
    supervisor is outside this worker's PID namespace, and its parent-death signal does that)."""
    loop = asyncio.get_running_loop()
    next_metrics = 0.0
    while True:
        publish(bool(local_ready()))
        if supervisor_pid is not None and os.getppid() != supervisor_pid:
            log.error("worker %d: supervisor %d is gone; stopping", slot, supervisor_pid)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        if loop.time() >= next_metrics:
            next_metrics = loop.time() + METRICS_EVERY_S
            try:
                state.write_metrics(render())
            except Exception:  # noqa: BLE001 - metrics must never stop a worker
                log.exception("worker %d: metrics snapshot failed", slot)
        await asyncio.sleep(TICK_S)


def main() -> int:
    job = read_job()
    if job is None:
        return 0  # the supervisor gave up before handing out this worker
    config, slot = job.config, job.slot
    # Every wall, trusted model code or not, before numpy or any framework is imported (their threads would
    # stay outside Landlock); the probe children this worker starts inherit them. In a PID namespace of its
    # own this is the namespace's first process: its parent (which the supervisor started) passes on SIGTERM
    # and ends as it ends, and its parent-death signal stops it when the supervisor goes.
    worker_walls.enter(config, job.root, slot)  # GET /v2 lists them (fwx.safety.walls.report)
    watch = job.supervisor_pid if os.getppid() == job.supervisor_pid else None
    from fwx.serving import loader
    from fwx.serving.server import run_server

    setup_logging(config.log_level, f"w{slot}")
    state = RunState.open(job.root, int(config.workers), slot)
    loader.load_guard = LoadGuard(state, slot)
    try:
        return asyncio.run(
            run_server(
                config,
                announce=False,
                setup=lambda server: install(server, state, slot, watch, job.wake_fd),
            )
        )
    finally:
        state.set_ready(False)
        state.close()


if __name__ == "__main__":
    import sys

    from fwx.errors import FwxError

    try:
        sys.exit(main())
    except FwxError as exc:
        print(f"fwx serve worker: {exc.message}", file=sys.stderr)
        sys.exit(exc.exit_code)
