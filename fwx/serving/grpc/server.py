"""The gRPC listener of ``fwx serve``: KServe v2 / Triton ``GRPCInferenceService`` + ``grpc.health.v1``.

Two servers, chosen by ``--grpc-server``. ``aio`` (the default, module
``fwx.serving.grpc.aio``): grpc.aio on the data plane's own event loop, handlers
are coroutines that await the data plane directly. ``sync`` (this module): a
thread pool whose handlers decode, hand the data-plane call to the loop and
wait. Re-measured with fwx's handlers on raw ``raw_input_contents`` and the
current data plane (README "Serving cost", benchmarks/grpc_ab.py), the hop
costs ~250 us of server CPU per request at concurrency 32, so aio now uses
~17-21% less CPU per request (an earlier measurement, docs/serve_grpc.md, had
favoured the thread pool).

``create_grpc_server`` returns a ``GrpcServer`` with the awaitable
``start()``/``stop(grace)`` of ``grpc.aio.Server``, so the process lifecycle
(``fwx.serving.server``) drives both transports the same way.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

import grpc

from fwx.errors import UsageError
from fwx.serving.grpc.safe_decode import add_servicer
from fwx.serving.grpc.servicer import HealthServicer, InferenceServicer, LoopBridge
from fwx.serving.proto import grpc_service_pb2_grpc as pb_grpc
from fwx.serving.proto import health_pb2_grpc

#: Handler threads; each in-flight RPC holds one while the data plane works on it.
MIN_THREADS = 64


class GrpcServer:
    """A started-on-demand gRPC server bound to one port; async start/stop like ``grpc.aio.Server``."""

    def __init__(self, server: grpc.Server, port: int, pool: concurrent.futures.ThreadPoolExecutor) -> None:
        self._server = server
        self._pool = pool
        self.port = port

    async def start(self) -> None:
        self._server.start()

    async def stop(self, grace: float | None = None) -> None:
        """Refuse new RPCs, let in-flight ones finish for ``grace`` seconds (the loop keeps running), then close."""
        done = self._server.stop(grace)
        await asyncio.get_running_loop().run_in_executor(None, done.wait)
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def wait_for_termination(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._server.wait_for_termination)


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def thread_count(config: Any) -> int:
    """Enough handler threads for every request the batcher could want in flight (2 x max batch)."""
    return max(MIN_THREADS, 2 * int(config.max_batch_size))


def create_grpc_server(dataplane: Any, config: Any) -> GrpcServer:
    """Build the gRPC server (not started) bound to ``config.host:config.grpc_port``.

    Call it inside the running event loop: the data plane's calls are sent to
    that loop. ``grpc_port`` 0 picks a free port (``bound_port``). Messages over
    ``grpc_max_message_bytes`` are refused by gRPC itself with RESOURCE_EXHAUSTED,
    in both directions, as are RPCs beyond the handler threads plus
    ``max_queue_size`` waiting for one. SO_REUSEPORT is off so a port already in
    use is an error, not a silent share.
    """
    if config.grpc_port < 0:
        raise UsageError("gRPC is disabled (--grpc-port -1)", hint="pass a port, or 0 for any free port")
    limit = int(config.grpc_max_message_bytes)
    threads = thread_count(config)
    options = [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
        ("grpc.so_reuseport", 1 if getattr(config, "reuse_port", False) else 0),  # on: --workers N
    ]
    if getattr(config, "grpc_server", "sync") == "aio":  # handlers as coroutines on this loop: no thread hop
        from fwx.serving.grpc.aio import create_aio_server

        return create_aio_server(
            dataplane,
            config,
            _address(config.host, config.grpc_port),
            options,  # type: ignore[return-value]
            threads + int(config.max_queue_size),
        )
    bridge = LoopBridge(asyncio.get_running_loop())
    pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="fwx-grpc")
    server = grpc.server(pool, options=options, maximum_concurrent_rpcs=threads + int(config.max_queue_size))
    add_servicer(
        server, pb_grpc.add_GRPCInferenceServiceServicer_to_server, InferenceServicer(dataplane, config, bridge)
    )
    add_servicer(server, health_pb2_grpc.add_HealthServicer_to_server, HealthServicer(dataplane, bridge))
    address = _address(config.host, config.grpc_port)
    try:
        port = server.add_insecure_port(address)
    except RuntimeError:
        port = 0
    if not port:
        pool.shutdown(wait=False)
        raise UsageError(
            f"cannot listen for gRPC on {address}",
            hint="the port is in use or the host is not local; choose another --grpc-port (-1 disables)",
        )
    return GrpcServer(server, port, pool)


def bound_port(server: GrpcServer) -> int:
    """The TCP port ``create_grpc_server`` bound (useful with ``grpc_port=0``)."""
    return server.port
