"""The gRPC listener of ``fwx serve``: KServe v2 / Triton ``GRPCInferenceService`` + ``grpc.health.v1``.

One server: ``grpc.aio`` on the data plane's own event loop, whose handlers
(``fwx.serving.grpc.servicer``) are coroutines that await the data plane
directly. ``create_grpc_server`` returns a ``GrpcServer`` with the awaitable
``start()``/``stop(grace)`` the process lifecycle (``fwx.serving.server``)
drives, as it does uvicorn's.
"""

from __future__ import annotations

from typing import Any

import grpc

from fwx.errors import UsageError
from fwx.serving.config import ServerConfig
from fwx.serving.grpc.plane import DataPlane
from fwx.serving.grpc.servicer import add_servicers

#: RPCs in flight before grpc refuses more with RESOURCE_EXHAUSTED: room for 2 x max batch, plus the queue.
MIN_RPCS = 64


class GrpcServer:
    """``grpc.aio.Server`` bound to one port, with that ``port``."""

    def __init__(self, server: grpc.aio.Server, port: int) -> None:
        self._server = server
        self.port = port

    async def start(self) -> None:
        await self._server.start()

    async def stop(self, grace: float | None = None) -> None:
        """Refuse new RPCs, let in-flight ones finish for ``grace`` seconds, then cancel the rest."""
        await self._server.stop(grace)

    async def wait_for_termination(self) -> None:
        await self._server.wait_for_termination()


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def max_rpcs(config: ServerConfig) -> int:
    """Enough concurrent RPCs for every request the batcher could want in flight, plus the queue."""
    return max(MIN_RPCS, 2 * int(config.max_batch_size)) + int(config.max_queue_size)


def create_grpc_server(dataplane: DataPlane, config: ServerConfig) -> GrpcServer:
    """Build the gRPC server (not started) bound to ``config.host:config.grpc_port``.

    Call it inside the running event loop: the handlers run on it. ``grpc_port``
    0 picks a free port (``bound_port``). Messages over ``grpc_max_message_bytes``
    are refused by gRPC itself with RESOURCE_EXHAUSTED, in both directions, as
    are RPCs beyond ``max_rpcs``. SO_REUSEPORT is off (unless ``--workers N``)
    so a port already in use is an error, not a silent share.
    """
    if config.grpc_port < 0:
        raise UsageError("gRPC is disabled (--grpc-port -1)", hint="pass a port, or 0 for any free port")
    limit = int(config.grpc_max_message_bytes)
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
        ("grpc.so_reuseport", 1 if config.reuse_port else 0),
    ]
    server = grpc.aio.server(options=options, maximum_concurrent_rpcs=max_rpcs(config))
    add_servicers(server, dataplane)
    address = _address(config.host, config.grpc_port)
    try:
        port = server.add_insecure_port(address)
    except RuntimeError:
        port = 0
    if not port:
        raise UsageError(
            f"cannot listen for gRPC on {address}",
            hint="the port is in use or the host is not local; choose another --grpc-port (-1 disables)",
        )
    return GrpcServer(server, port)


def bound_port(server: GrpcServer) -> int:
    """The TCP port ``create_grpc_server`` bound (useful with ``grpc_port=0``)."""
    return server.port
