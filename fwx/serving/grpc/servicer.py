"""The KServe v2 / Triton gRPC servicers: coroutines on the data plane's own loop (grpc.aio).

Each handler translates the message, awaits the data plane directly and
encodes the answer; there is no thread hop (what the old thread-pool server's
hop cost is measured in docs/serve_grpc.md).
Every exception becomes a gRPC status in one place, ``fwx.serving.grpc.status``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from fwx.errors import FwxError, InputError, NotFoundError, UnavailableError
from fwx.serving.grpc import codecs
from fwx.serving.grpc.plane import DataPlane, Decode
from fwx.serving.grpc.safe_decode import BadMessage
from fwx.serving.grpc.status import Context, abort_with, auth_of, deadline_of, status_of
from fwx.serving.proto import grpc_service_pb2 as pb
from fwx.serving.proto import grpc_service_pb2_grpc as pb_grpc
from fwx.serving.proto import health_pb2, health_pb2_grpc
from fwx.serving.types import InferRequest

log = logging.getLogger("fwx.serving.grpc")

#: Names the health service answers for ("" = the whole server).
SERVICE_NAMES = frozenset({"", "inference.GRPCInferenceService"})
HEALTH_WATCH_PERIOD_S = 1.0
MAX_HEALTH_WATCHERS = 16
_T = TypeVar("_T")
Handler = Callable[[Any, Any, Context], Awaitable[_T]]


def _rpc(method: Handler[_T]) -> Handler[_T]:
    """Turn any exception of a unary handler into its gRPC status (hint in ``fwx-hint``)."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: Context) -> _T:
        try:
            return await method(self, request, context)
        except Exception as exc:
            await abort_with(context, exc)
            raise  # not reached: abort raises

    return wrapper


def _decoded(request: Any, deadline: float | None) -> Decode:
    """The decode step ``handle_infer`` runs after it has authorized the caller (a decode error is raised there)."""

    async def decode() -> tuple[InferRequest, None]:
        if isinstance(request, BadMessage):
            raise InputError(request.message, hint="send a serialized inference.ModelInferRequest")
        return codecs.decode_infer_request(request, deadline), None

    return decode


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    """``inference.GRPCInferenceService``: every RPC translates and calls the data plane.

    Each passes the ``authorization`` metadata through untouched; which RPC needs
    which token is decided by the data plane, the same table REST uses.
    """

    def __init__(self, dataplane: DataPlane) -> None:
        self._dp = dataplane

    @_rpc
    async def ServerLive(self, request: Any, context: Context) -> Any:
        return pb.ServerLiveResponse(live=self._dp.live())

    @_rpc
    async def ServerReady(self, request: Any, context: Context) -> Any:
        return pb.ServerReadyResponse(ready=self._dp.ready())

    @_rpc
    async def ModelReady(self, request: Any, context: Context) -> Any:
        ready = self._dp.model_ready(request.name, request.version or None, auth=auth_of(context))
        return pb.ModelReadyResponse(ready=ready)

    @_rpc
    async def ServerMetadata(self, request: Any, context: Context) -> Any:
        return codecs.server_metadata_to_pb(self._dp.server_metadata())

    @_rpc
    async def ModelMetadata(self, request: Any, context: Context) -> Any:
        meta = self._dp.model_metadata(request.name, request.version or None, auth=auth_of(context))
        return codecs.model_metadata_to_pb(meta)

    @_rpc
    async def ModelInfer(self, request: Any, context: Context) -> Any:
        decode = _decoded(request, deadline_of(context))
        _, _, response = await self._dp.handle_infer(decode, auth=auth_of(context))
        return codecs.encode_infer_response(response)

    @_rpc
    async def ModelConfig(self, request: Any, context: Context) -> Any:
        config = self._dp.model_config(request.name, request.version or None, auth=auth_of(context))
        return codecs.model_config_to_pb(config)

    @_rpc
    async def ModelStatistics(self, request: Any, context: Context) -> Any:
        stats = self._dp.model_statistics(request.name or None, request.version or None, auth=auth_of(context))
        return codecs.model_statistics_to_pb(stats)

    @_rpc
    async def RepositoryIndex(self, request: Any, context: Context) -> Any:
        index = self._dp.repository_index(ready_only=bool(request.ready), auth=auth_of(context))
        return codecs.repository_index_to_pb(index)

    @_rpc
    async def RepositoryModelLoad(self, request: Any, context: Context) -> Any:
        await self._dp.load_model(request.model_name, auth=auth_of(context))
        return pb.RepositoryModelLoadResponse()

    @_rpc
    async def RepositoryModelUnload(self, request: Any, context: Context) -> Any:
        await self._dp.unload_model(request.model_name, auth=auth_of(context))
        return pb.RepositoryModelUnloadResponse()

    async def ModelStreamInfer(self, requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
        """Bidirectional stream: requests run concurrently; each answer (or error) is one message.

        As in Triton, an error does not end the stream: it comes back in
        ``error_message`` and the client matches answers to requests by ``id``.
        A caller the data plane refuses is refused once, when the stream opens.
        """
        auth = auth_of(context)
        try:
            self._dp.authorize("infer", auth)
        except FwxError as exc:
            await abort_with(context, exc)
        async for reply in _completed(requests, lambda request: self._stream_one(request, context, auth)):
            yield reply

    async def _stream_one(self, request: Any, context: Context, auth: str | None) -> AsyncIterator[Any]:
        """One request of a stream -> its reply messages (a generation streams one per text delta); never raises."""
        try:
            async for response in self._dp.stream_infer(_decoded(request, deadline_of(context)), auth=auth):
                yield pb.ModelStreamInferResponse(infer_response=codecs.encode_infer_response(response))
        except (Exception, asyncio.CancelledError) as exc:  # noqa: BLE001 (an error is a reply; the stream goes on)
            reply = pb.ModelStreamInferResponse(error_message=status_of(exc)[1])
            reply.infer_response.id = request.id
            yield reply


async def _completed(requests: AsyncIterator[Any], answer: Callable[[Any], AsyncIterator[Any]]) -> AsyncIterator[Any]:
    """Start ``answer(request)`` for each request as it arrives; yield every reply as it is made."""
    replies: asyncio.Queue[Any] = asyncio.Queue()
    pending: set[asyncio.Task[Any]] = set()
    end, finished = object(), object()

    async def run(request: Any) -> None:
        async for reply in answer(request):
            replies.put_nowait(reply)

    def ended(task: asyncio.Task[Any]) -> None:  # also for a task cancelled before it ran
        pending.discard(task)
        replies.put_nowait(finished)

    async def read() -> None:
        count = 0
        try:
            async for request in requests:
                task = asyncio.ensure_future(run(request))
                pending.add(task)
                task.add_done_callback(ended)
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
            elif item is finished:
                done += 1
            else:
                yield item
    finally:
        reader.cancel()
        for task in list(pending):
            task.cancel()


class HealthServicer(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
    """``grpc.health.v1.Health``: SERVING once every model is loaded and warmed, until shutdown."""

    def __init__(self, dataplane: DataPlane) -> None:
        self._dp = dataplane
        self._watchers = 0

    def _status(self, service: str) -> Any:
        if service not in SERVICE_NAMES:
            return health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
        serving = self._dp.ready()
        return health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING

    @_rpc
    async def Check(self, request: Any, context: Context) -> Any:
        status = self._status(request.service)
        if status == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN:
            raise NotFoundError(
                f"unknown service {request.service!r}", hint="check '' or 'inference.GRPCInferenceService'"
            )
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(self, request: Any, context: Context) -> AsyncIterator[Any]:
        """Send the status now and again whenever it changes (polled: readiness has no event)."""
        if self._watchers >= MAX_HEALTH_WATCHERS:
            await abort_with(context, UnavailableError("too many health Watch streams", hint="use Check"))
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


def add_servicers(server: grpc.aio.Server, dataplane: DataPlane) -> None:
    """Register both services on ``server``, with request decoding that never ends in INTERNAL."""
    from fwx.serving.grpc.safe_decode import add_servicer

    add_servicer(server, pb_grpc.add_GRPCInferenceServiceServicer_to_server, InferenceServicer(dataplane))
    add_servicer(server, health_pb2_grpc.add_HealthServicer_to_server, HealthServicer(dataplane))
