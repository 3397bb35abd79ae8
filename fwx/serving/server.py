"""Process lifecycle of ``fwx serve``: one event loop for uvicorn, the gRPC bridge and the data plane.

Start: listeners first (liveness answers while models load, readiness says
no), then the manager loads and warms every model, then ready. Stop (SIGTERM
or SIGINT): readiness false at once; after ``shutdown_delay_s`` (default 0) of
still serving new requests, new inferences get 503/UNAVAILABLE, then
in-flight and queued requests drain for up to ``drain_seconds``, the
listeners close, models unload, and the process exits 0. A second signal
skips the drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

from fwx.errors import UsageError
from fwx.serving.config import ServerConfig
from fwx.serving.dataplane import DataPlane, build_dataplane
from fwx.serving.readiness import readiness_blockers
from fwx.serving.sockets import bind_tcp
from fwx.serving.usage import print_usage_examples

log = logging.getLogger("fwx.serving")

__all__ = ["Server", "print_usage_examples", "run_server"]


def _uvicorn_server(app: Any, config: ServerConfig) -> Any:
    import uvicorn

    from fwx.serving.rest.chunk_guard import guarded_protocol

    class _Server(uvicorn.Server):  # type: ignore[misc]
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:  # fwx handles signals itself
            yield

    # log_config=None: uvicorn's records go through fwx's handler and format (see fwx.serving.logs)
    ucfg = uvicorn.Config(
        app,
        log_level=_uvicorn_level(config),
        access_log=False,
        lifespan="off",
        log_config=None,
        timeout_graceful_shutdown=max(1, int(config.drain_seconds)),
        server_header=False,
        http=guarded_protocol(config.max_body_bytes) or "auto",
    )
    return _Server(ucfg)


class Server:
    """HTTP + gRPC listeners over one data plane, in the running event loop."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.dataplane: DataPlane = build_dataplane(config)
        self.http_port: int | None = None
        self.grpc_port: int | None = None
        self.app: Any = None
        self._uvicorn: Any = None
        self._uvicorn_task: asyncio.Task[None] | None = None
        self._grpc: Any = None
        self._stopped = False
        self._force = asyncio.Event()
        self._ready_watch: asyncio.Task[None] | None = None
        #: Open the ports only once the models are loaded and warm (a restarted worker whose peers serve:
        #: it must take no connection it would answer 503). Off: listeners first, so liveness answers.
        self.listen_after_load = False

    @property
    def ready(self) -> bool:
        return self.dataplane.ready()

    async def start_listeners(self) -> None:
        """Open the HTTP and gRPC ports (models not loaded yet: live, not ready)."""
        cfg = self.config
        if cfg.http_port >= 0:
            from fwx.serving.rest.app import create_app

            sock = bind_tcp(cfg.host, cfg.http_port, reuse_port=cfg.reuse_port)
            self.http_port = sock.getsockname()[1]
            self.app = create_app(self.dataplane, cfg)
            self._uvicorn = _uvicorn_server(self.app, cfg)
            self._uvicorn_task = asyncio.create_task(self._uvicorn.serve(sockets=[sock]), name="fwx-http")
            while not self._uvicorn.started:
                if self._uvicorn_task.done():
                    self._uvicorn_task.result()
                    raise UsageError("the HTTP server stopped while starting")
                await asyncio.sleep(0.005)
        if cfg.grpc_port >= 0:
            from fwx.serving.grpc.server import bound_port, create_grpc_server

            self._grpc = create_grpc_server(self.dataplane, cfg)
            await self._grpc.start()
            self.grpc_port = bound_port(self._grpc)

    async def start(self) -> None:
        """Listeners, then load and warm every model (the other way round with ``listen_after_load``)."""
        if not self.listen_after_load:
            await self.start_listeners()
        await self.dataplane.manager.start()
        if self.listen_after_load:
            await self.start_listeners()
        # the manager's own readiness: a supervised worker's dataplane.ready() also waits for its peers
        if self.dataplane.manager.ready:
            log.info("fwx serve ready: HTTP %s, gRPC %s", self.http_port, self.grpc_port)
        else:
            blockers = readiness_blockers(self.dataplane.manager) or ["see POST /v2/repository/index"]
            log.error(
                "fwx serve is NOT ready (/v2/health/ready answers 400; HTTP %s, gRPC %s): %s",
                self.http_port,
                self.grpc_port,
                "; ".join(blockers),
            )
            self._ready_watch = asyncio.create_task(self._announce_when_ready(), name="fwx-ready-watch")

    async def _announce_when_ready(self) -> None:
        """A fixed version published later (polling) makes the server ready: say so once."""
        while not self.dataplane.closing:
            await asyncio.sleep(0.5)
            if self.dataplane.manager.ready:
                log.info("fwx serve is now ready: HTTP %s, gRPC %s", self.http_port, self.grpc_port)
                return

    def force(self) -> None:
        """Cut a running drain short (a second SIGTERM/SIGINT)."""
        self._force.set()

    async def _drain(self, seconds: float) -> bool:
        drained = asyncio.create_task(self.dataplane.drain(seconds))
        forced = asyncio.create_task(self._force.wait())
        await asyncio.wait({drained, forced}, return_when=asyncio.FIRST_COMPLETED)
        forced.cancel()
        if not drained.done():
            drained.cancel()
            return False
        return drained.result()

    async def stop(self, *, drain: bool = True) -> None:
        """Refuse new work, drain in-flight and queued requests, close listeners, unload models."""
        if self._stopped:
            return
        self._stopped = True
        if self._ready_watch is not None:
            self._ready_watch.cancel()
        dp = self.dataplane
        if not drain:
            self._force.set()
        elif self.config.shutdown_delay_s > 0:
            dp.mark_unready()  # keep serving while the load balancer notices (--shutdown-delay-seconds)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._force.wait(), self.config.shutdown_delay_s)
        dp.begin_shutdown()
        end = time.monotonic() + self.config.drain_seconds
        if not await self._drain(self.config.drain_seconds):
            log.warning("%d request(s) still in flight; stopping without waiting for them", dp.inflight)
            dp.abort_queued()
            end = time.monotonic()
        if self._grpc is not None:
            await self._grpc.stop(max(0.1, end - time.monotonic()))
        if self._uvicorn is not None and self._uvicorn_task is not None:
            self._uvicorn.config.timeout_graceful_shutdown = max(1, int(end - time.monotonic()))
            self._uvicorn.should_exit = True
            with contextlib.suppress(asyncio.CancelledError, SystemExit):
                await self._uvicorn_task
        await dp.manager.stop()


async def run_server(
    config: ServerConfig, *, announce: bool = True, setup: Callable[[Server], object] | None = None
) -> int:
    """Serve until SIGTERM/SIGINT, then drain and return the exit code (0).

    ``setup`` sees the server before it starts (a supervised worker's hooks, ``fwx.serving.workers``).
    """
    loop = asyncio.get_running_loop()
    server = Server(config)
    if setup is not None:
        setup(server)
    stop = asyncio.Event()
    signals = {"count": 0}

    def on_signal(signum: int) -> None:
        signals["count"] += 1
        # Readiness false at once, before anything else runs; new work refused unless a delay is set.
        if config.shutdown_delay_s > 0 and signals["count"] == 1:
            server.dataplane.mark_unready()
        else:
            server.dataplane.begin_shutdown()
        log.info(
            "received %s: %s",
            signal.Signals(signum).name,
            "draining" if signals["count"] == 1 else "stopping without waiting",
        )
        if signals["count"] > 1:
            server.force()
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        starting = asyncio.create_task(server.start())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if starting.done():
            if starting.exception() is not None:
                stopping.cancel()
                await server.stop(drain=False)
                starting.result()  # re-raise the start-up error (port in use, ...)
            if announce:
                print_usage_examples(config, http_port=server.http_port, grpc_port=server.grpc_port)
            await stopping
        else:
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
        await server.stop(drain=signals["count"] < 2)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    log.info("fwx serve stopped")
    return 0


def _uvicorn_level(config: ServerConfig) -> str:
    """uvicorn logs only warnings (its start/stop lines repeat fwx's) unless --debug or --log-level debug."""
    from fwx import ui

    level = config.log_level.lower()
    return "debug" if ui.state.debug or level == "debug" else ("warning" if level == "info" else level)
