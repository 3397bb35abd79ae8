"""The gRPC listener on ``grpc.aio``, in the data plane's own event loop (``--grpc-server aio``).

Same services, same codecs, same status mapping as the thread-pool server
(``fwx.serving.grpc.servicer``); the difference is where a handler runs. There,
each RPC is decoded on a gRPC handler thread and its data-plane call is handed
to the loop with ``run_coroutine_threadsafe`` and waited for: two thread
switches, a self-pipe write and a GIL hand-off per request. Here the handler is
a coroutine on the loop and awaits the data plane directly; grpc.aio's own
poller thread is the only other thread involved. Measured per request
(benchmarks/grpc_floor.py, echo data plane), the hop alone was ~250 us of
server CPU at concurrency 32 on the 2-core dev box, grpcio's own sync floor
~200-300 us.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from fwx.errors import FwxError, NotFoundError, UsageError
from fwx.serving.grpc import codecs
from fwx.serving.grpc.safe_decode import _Capture, parse_or_refuse
from fwx.serving.grpc.servicer import (
    HEALTH_WATCH_PERIOD_S,
    MAX_HEALTH_WATCHERS,
    SERVICE_NAMES,
    _auth,
    _deadline,
    _decoded,
    _status_of,
)
from fwx.serving.proto import grpc_service_pb2 as pb
from fwx.serving.proto import grpc_service_pb2_grpc as pb_grpc
from fwx.serving.proto import health_pb2, health_pb2_grpc

log = logging.getLogger("fwx.serving.grpc")
_T = TypeVar("_T")
Handler = Callable[[Any, Any, Any], Awaitable[_T]]


def _rpc(method: Handler[_T]) -> Handler[_T]:
    """Turn any exception of a unary coroutine handler into its gRPC status (hint in ``fwx-hint``)."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: Any) -> _T:
        try:
            return await method(self, request, context)
        except Exception as exc:
            code, message, hint = _status_of(exc)
            if hint:
                context.set_trailing_metadata((("fwx-hint", hint),))
            await context.abort(code, message)
            raise  # not reached: abort raises

    return wrapper


class AioInferenceServicer(pb_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    """``inference.GRPCInferenceService`` as coroutines awaiting the data plane on its loop."""

    def __init__(self, dataplane: Any) -> None:
        self._dp = dataplane

    @_rpc
    async def ServerLive(self, request: Any, context: Any) -> Any:
        return pb.ServerLiveResponse(live=self._dp.live())

    @_rpc
    async def ServerReady(self, request: Any, context: Any) -> Any:
        return pb.ServerReadyResponse(ready=self._dp.ready())

    @_rpc
    async def ModelReady(self, request: Any, context: Any) -> Any:
        return pb.ModelReadyResponse(
            ready=self._dp.model_ready(request.name, request.version or None, auth=_auth(context))
        )

    @_rpc
    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        return codecs.server_metadata_to_pb(self._dp.server_metadata())

    @_rpc
    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        return codecs.model_metadata_to_pb(
            self._dp.model_metadata(request.name, request.version or None, auth=_auth(context))
        )

    @_rpc
    async def ModelInfer(self, request: Any, context: Any) -> Any:
        _, _, response = await self._dp.handle_infer(_decoded(request, _deadline(context)), auth=_auth(context))
        return codecs.encode_infer_response(response)

    @_rpc
    async def ModelConfig(self, request: Any, context: Any) -> Any:
        return codecs.model_config_to_pb(
            self._dp.model_config(request.name, request.version or None, auth=_auth(context))
        )

    @_rpc
    async def ModelStatistics(self, request: Any, context: Any) -> Any:
        return codecs.model_statistics_to_pb(
            self._dp.model_statistics(request.name or None, request.version or None, auth=_auth(context))
        )

    @_rpc
    async def RepositoryIndex(self, request: Any, context: Any) -> Any:
        return codecs.repository_index_to_pb(
            self._dp.repository_index(ready_only=bool(request.ready), auth=_auth(context))
        )

    @_rpc
    async def RepositoryModelLoad(self, request: Any, context: Any) -> Any:
        await self._dp.load_model(request.model_name, auth=_auth(context))
        return pb.RepositoryModelLoadResponse()

    @_rpc
    async def RepositoryModelUnload(self, request: Any, context: Any) -> Any:
        await self._dp.unload_model(request.model_name, auth=_auth(context))
        return pb.RepositoryModelUnloadResponse()

    async def ModelStreamInfer(self, requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        """Bidirectional stream: requests run concurrently, answers (or errors) come back as they finish."""
        auth = _auth(context)
        try:
            self._dp.authorize("infer", auth)
        except FwxError as exc:
            code, message, _ = _status_of(exc)
            await context.abort(code, message)
        replies: asyncio.Queue[Any] = asyncio.Queue()
        pending: set[asyncio.Task[Any]] = set()
        end = object()

        async def read() -> None:
            count = 0
            try:
                async for request in requests:
                    task = asyncio.ensure_future(self._stream_one(request, _deadline(context), auth))
                    pending.add(task)
                    task.add_done_callback(replies.put_nowait)
                    count += 1
            except Exception:  # noqa: BLE001 - the client cancelled or the stream broke: stop reading
                log.debug("ModelStreamInfer: request stream ended", exc_info=True)
            replies.put_nowait((end, count))

        reader = asyncio.ensure_future(read())
        done, total = 0, None
        try:
            while total is None or done < total:
                item = await replies.get()
                if isinstance(item, tuple) and item[0] is end:
                    total = item[1]
                    continue
                pending.discard(item)
                done += 1
                if not item.cancelled():
                    yield item.result()
        finally:
            reader.cancel()
            for task in pending:
                task.cancel()

    async def _stream_one(self, request: Any, deadline: float | None, auth: str | None) -> Any:
        try:
            _, _, response = await self._dp.handle_infer(_decoded(request, deadline), auth=auth)
            return pb.ModelStreamInferResponse(infer_response=codecs.encode_infer_response(response))
        except (Exception, asyncio.CancelledError) as exc:  # noqa: BLE001 (an error is a reply; the stream goes on)
            reply = pb.ModelStreamInferResponse(error_message=_status_of(exc)[1])
            reply.infer_response.id = request.id
            return reply


class AioHealthServicer(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
    """``grpc.health.v1.Health``: SERVING once every model is loaded and warmed, until shutdown."""

    def __init__(self, dataplane: Any) -> None:
        self._dp = dataplane
        self._watchers = 0

    def _status(self, service: str) -> Any:
        if service not in SERVICE_NAMES:
            return health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
        return (
            health_pb2.HealthCheckResponse.SERVING if self._dp.ready() else health_pb2.HealthCheckResponse.NOT_SERVING
        )

    @_rpc
    async def Check(self, request: Any, context: Any) -> Any:
        status = self._status(request.service)
        if status == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN:
            raise NotFoundError(
                f"unknown service {request.service!r}", hint="check '' or 'inference.GRPCInferenceService'"
            )
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(self, request: Any, context: Any) -> AsyncIterator[Any]:
        """Send the status now and again whenever it changes (polled: readiness has no event)."""
        if self._watchers >= MAX_HEALTH_WATCHERS:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "too many health Watch streams")
        self._watchers += 1
        try:
            last = None
            while True:
                status = self._status(request.service)
                if status != last:
                    last = status
                    yield health_pb2.HealthCheckResponse(status=status)
                await asyncio.sleep(HEALTH_WATCH_PERIOD_S)
        finally:
            self._watchers -= 1


def add_aio_servicer(server: Any, add_to_server: Callable[[Any, Any], None], servicer: Any) -> None:
    """``safe_decode.add_servicer`` for grpc.aio: bytes that do not parse never become INTERNAL.

    Inference RPCs get a ``BadMessage`` (the data plane refuses and counts it after
    the token check); any other RPC answers INVALID_ARGUMENT naming itself.
    """
    capture = _Capture()
    add_to_server(servicer, capture)
    for service, handlers in capture.services.items():
        safe = {name: _aio_safe(name, handler) for name, handler in handlers.items()}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, safe),))


def _aio_safe(rpc: str, handler: Any) -> Any:
    parse = handler.request_deserializer
    if parse is None:
        return handler

    async def decode(raw: bytes, context: Any) -> Any:
        message, refused = parse_or_refuse(rpc, parse, raw)
        if refused is not None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refused)  # raises
        return message

    if handler.unary_unary is not None:
        unary = handler.unary_unary

        async def unary_unary(raw: bytes, context: Any) -> Any:
            return await unary(await decode(raw, context), context)

        return handler._replace(request_deserializer=None, unary_unary=unary_unary)
    if handler.unary_stream is not None:
        replies = handler.unary_stream

        async def unary_stream(raw: bytes, context: Any) -> AsyncIterator[Any]:
            async for reply in replies(await decode(raw, context), context):
                yield reply

        return handler._replace(request_deserializer=None, unary_stream=unary_stream)
    streaming = handler.stream_stream

    async def each(raws: AsyncIterator[bytes], context: Any) -> AsyncIterator[Any]:
        async for raw in raws:
            yield await decode(raw, context)

    async def stream_stream(raws: AsyncIterator[bytes], context: Any) -> AsyncIterator[Any]:
        async for reply in streaming(each(raws, context), context):
            yield reply

    return handler._replace(request_deserializer=None, stream_stream=stream_stream)


class AioGrpcServer:
    """``grpc.aio.Server`` with the ``port`` attribute the process lifecycle reads."""

    def __init__(self, server: grpc.aio.Server, port: int) -> None:
        self._server = server
        self.port = port

    async def start(self) -> None:
        await self._server.start()

    async def stop(self, grace: float | None = None) -> None:
        await self._server.stop(grace)

    async def wait_for_termination(self) -> None:
        await self._server.wait_for_termination()


def create_aio_server(
    dataplane: Any, config: Any, address: str, options: list[tuple[str, Any]], max_rpcs: int
) -> AioGrpcServer:
    """Build (not start) the grpc.aio server on the running loop; same options as the thread-pool one."""
    server = grpc.aio.server(options=options, maximum_concurrent_rpcs=max_rpcs)
    add_aio_servicer(server, pb_grpc.add_GRPCInferenceServiceServicer_to_server, AioInferenceServicer(dataplane))
    add_aio_servicer(server, health_pb2_grpc.add_HealthServicer_to_server, AioHealthServicer(dataplane))
    try:
        port = server.add_insecure_port(address)
    except RuntimeError:
        port = 0
    if not port:
        raise UsageError(
            f"cannot listen for gRPC on {address}",
            hint="the port is in use or the host is not local; choose another --grpc-port (-1 disables)",
        )
    return AioGrpcServer(server, port)
