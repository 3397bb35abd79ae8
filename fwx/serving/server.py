"""Process lifecycle of ``fwx serve``: one event loop for uvicorn, the gRPC bridge and the data plane.

Start: listeners first (liveness answers while models load, readiness says
no), then the manager loads and warms every model, then ready. Stop (SIGTERM
or SIGINT): readiness false at once; after ``shutdown_delay_s`` (default 0) of
still serving as usual, the listeners close (new connections are refused),
every request already sent on an open connection or RPC is answered, for up to
``drain_seconds``, models unload, and the process exits 0. A second signal
skips the drain (queued requests get 503/UNAVAILABLE).
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
from fwx.serving.client_examples import print_usage_examples
from fwx.serving.config import ServerConfig
from fwx.serving.dataplane import DataPlane, build_dataplane
from fwx.serving.readiness import readiness_blockers
from fwx.serving.sockets import bind_tcp

log = logging.getLogger("fwx.serving")

__all__ = ["Server", "print_usage_examples", "run_server"]


def _uvicorn_server(app: Any, config: ServerConfig) -> Any:
    import uvicorn

    from fwx.serving.rest.protocol import http_protocol

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
        http=http_protocol(config.max_body_bytes) or "auto",
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

    async def _close_listeners(self, seconds: float) -> None:
        """Stop accepting connections and RPCs at once; answer everything already received (up to ``seconds``)."""
        closing: list[Any] = []
        if self._grpc is not None:
            closing.append(self._grpc.stop(seconds))  # new RPCs refused, those in flight run to the end
        if self._uvicorn is not None and self._uvicorn_task is not None:
            # uvicorn closes its listener and each connection once nothing sent on it is unanswered
            # (fwx.serving.rest.protocol); after ``seconds`` it cancels what is left
            self._uvicorn.config.timeout_graceful_shutdown = max(0.1, seconds)
            self._uvicorn.should_exit = True
            closing.append(self._uvicorn_task)
        for done in asyncio.as_completed(closing):
            with contextlib.suppress(asyncio.CancelledError, SystemExit):
                await done
        await self.dataplane.drain(max(0.0, seconds))

    async def _drain(self, seconds: float) -> bool:
        """``_close_listeners`` unless cut short by a second signal or the time limit (False)."""
        end = time.monotonic() + seconds
        closing = asyncio.create_task(self._close_listeners(seconds))
        forced = asyncio.create_task(self._force.wait())
        await asyncio.wait({closing, forced}, timeout=seconds + 1.0, return_when=asyncio.FIRST_COMPLETED)
        forced.cancel()
        cut = not closing.done() or self.dataplane.inflight > 0
        if cut:  # queued requests get 503, running batches finish, connections close now
            self.dataplane.begin_shutdown()
            self.dataplane.abort_queued()
            if self._uvicorn is not None:
                self._uvicorn.force_exit = True
            if self._grpc is not None:
                await self._grpc.stop(0)
            with contextlib.suppress(asyncio.CancelledError, SystemExit):
                await asyncio.wait_for(closing, max(1.0, end - time.monotonic()))
        return not cut

    async def stop(self, *, drain: bool = True) -> None:
        """Stop accepting, answer every request already received, close, unload models.

        Readiness is false from the start. With ``--shutdown-delay-seconds`` the
        ports stay open and serve as usual for that long first (the load
        balancer's time to notice). Then the listeners close, and whatever was
        already sent on an open connection or RPC is answered, for up to
        ``--drain-seconds``; only past that (or on a second signal) are queued
        requests refused with 503/UNAVAILABLE.
        """
        if self._stopped:
            return
        self._stopped = True
        if self._ready_watch is not None:
            self._ready_watch.cancel()
        dp = self.dataplane
        dp.mark_unready()
        if not drain:
            self._force.set()
        elif self.config.shutdown_delay_s > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._force.wait(), self.config.shutdown_delay_s)
        seconds = 0.0 if self._force.is_set() else float(self.config.drain_seconds)
        if not await self._drain(seconds):
            log.warning("stopped without waiting for every request (%d still in flight)", dp.inflight)
        dp.begin_shutdown()
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
        # Readiness false at once, before anything else runs; what was already sent is still answered.
        server.dataplane.mark_unready()
        if signals["count"] > 1:
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
