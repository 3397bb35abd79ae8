"""The KServe v2 / Triton gRPC servicers: thin translators over the data plane.

They run on gRPC's handler threads (see ``fwx.serving.grpc.server`` for why), decode the
message there, and hand every data-plane call to the server's event loop with
``asyncio.run_coroutine_threadsafe``, so data-plane state is only ever touched
on the loop, as with REST. ``FwxError`` becomes a gRPC status in exactly one
place (``_rpc``/``_status_of``), using the error's own ``grpc_code``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc

from fwx.errors import FwxError, InputError, NotFoundError, UnavailableError
from fwx.serving.grpc import codecs
from fwx.serving.grpc.safe_decode import BadMessage
from fwx.serving.proto import grpc_service_pb2 as pb
from fwx.serving.proto import grpc_service_pb2_grpc as pb_grpc
from fwx.serving.proto import health_pb2, health_pb2_grpc

log = logging.getLogger("fwx.serving.grpc")

#: Names the health service answers for ("" = the whole server).
SERVICE_NAMES = frozenset({"", "inference.GRPCInferenceService"})
HEALTH_WATCH_PERIOD_S = 1.0
MAX_HEALTH_WATCHERS = 16  # each open Watch stream holds a handler thread
_NO_DEADLINE_S = 1e8  # grpc reports "no deadline" as a huge time_remaining()
_T = TypeVar("_T")


def _status_of(exc: BaseException) -> tuple[grpc.StatusCode, str, str | None]:
    """The one mapping of an exception to (gRPC status, message, hint)."""
    if isinstance(exc, FwxError):
        return getattr(grpc.StatusCode, exc.grpc_code, grpc.StatusCode.INTERNAL), exc.message, exc.hint
    if isinstance(exc, (concurrent.futures.CancelledError, asyncio.CancelledError)):
        return grpc.StatusCode.CANCELLED, "the request was cancelled", None
    log.error("gRPC request failed", exc_info=exc)
    return grpc.StatusCode.INTERNAL, f"internal error ({type(exc).__name__}); see the server log", None


def _rpc(method: Callable[[Any, Any, grpc.ServicerContext], _T]) -> Callable[[Any, Any, grpc.ServicerContext], _T]:
    """Turn any exception of a unary handler into its gRPC status (hint in trailing metadata ``fwx-hint``)."""

    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> _T:
        try:
            return method(self, request, context)
        except Exception as exc:
            code, message, hint = _status_of(exc)
            if hint:
                context.set_trailing_metadata((("fwx-hint", hint),))
            context.abort(code, message)
            raise  # not reached: abort raises

    return wrapper


def _metadata_value(context: grpc.ServicerContext, key: str) -> str | None:
    for item in context.invocation_metadata() or ():
        if item[0] == key:
            value = item[1]
            return value.decode("latin-1") if isinstance(value, bytes) else str(value)
    return None


def _auth(context: grpc.ServicerContext) -> str | None:
    """The ``authorization`` metadata as sent; the data plane parses and checks it."""
    return _metadata_value(context, "authorization")


def _deadline(context: grpc.ServicerContext) -> float | None:
    remaining = context.time_remaining()
    return None if remaining is None or remaining > _NO_DEADLINE_S else time.monotonic() + remaining


async def _call(fn: Callable[..., _T], *args: Any) -> _T:
    return fn(*args)


class LoopBridge:
    """Runs data-plane calls on the server's event loop from gRPC handler threads."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def submit(self, coro: Any) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Any, context: grpc.ServicerContext) -> Any:
        """Await ``coro`` on the loop; a cancelled RPC (client gone, deadline) cancels it there too."""
        fut = self.submit(coro)
        if not context.add_callback(fut.cancel):  # called when the RPC ends, however it ends
            fut.cancel()
        return fut.result()

    def call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """A synchronous data-plane method, run on the loop (its state is never read from another thread).

        Nothing to cancel (it returns at once), so no RPC callback is added:
        a health Watch polls this every second for as long as it is open.
        """
        return self.submit(_call(fn, *args)).result()  # type: ignore[no-any-return]


async def _ready(value: _T) -> tuple[_T, None]:
    return value, None


async def _raise(exc: BaseException) -> tuple[Any, None]:
    raise exc


def _decoded(request: Any, deadline: float | None) -> Callable[[], Any]:
    """Decode here, on the handler thread (keeps the loop free); the data plane sees the result,
    or the decode error, only after it has authorized the caller."""
    try:
        if isinstance(request, BadMessage):
            raise InputError(request.message, hint="send a serialized inference.ModelInferRequest")
        decoded = codecs.decode_infer_request(request, deadline)
    except FwxError as exc:
        error = exc
        return lambda: _raise(error)
    return lambda: _ready(decoded)


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    """``inference.GRPCInferenceService``: every RPC translates and calls the data plane.

    Each passes the ``authorization`` metadata through untouched; which RPC needs
    which token is decided by the data plane, the same table REST uses.
    """

    def __init__(self, dataplane: Any, config: Any, bridge: LoopBridge) -> None:
        self._dp = dataplane
        self._bridge = bridge

    @_rpc
    def ServerLive(self, request: Any, context: grpc.ServicerContext) -> Any:
        return pb.ServerLiveResponse(live=self._bridge.call(self._dp.live))

    @_rpc
    def ServerReady(self, request: Any, context: grpc.ServicerContext) -> Any:
        return pb.ServerReadyResponse(ready=self._bridge.call(self._dp.ready))

    @_rpc
    def ModelReady(self, request: Any, context: grpc.ServicerContext) -> Any:
        ready = self._bridge.call(
            functools.partial(self._dp.model_ready, request.name, request.version or None, auth=_auth(context))
        )
        return pb.ModelReadyResponse(ready=ready)

    @_rpc
    def ServerMetadata(self, request: Any, context: grpc.ServicerContext) -> Any:
        return codecs.server_metadata_to_pb(self._bridge.call(self._dp.server_metadata))

    @_rpc
    def ModelMetadata(self, request: Any, context: grpc.ServicerContext) -> Any:
        meta = self._bridge.call(
            functools.partial(self._dp.model_metadata, request.name, request.version or None, auth=_auth(context))
        )
        return codecs.model_metadata_to_pb(meta)

    @_rpc
    def ModelInfer(self, request: Any, context: grpc.ServicerContext) -> Any:
        decode = _decoded(request, _deadline(context))
        _, _, response = self._bridge.run(self._dp.handle_infer(decode, auth=_auth(context)), context)
        return codecs.encode_infer_response(response)

    @_rpc
    def ModelConfig(self, request: Any, context: grpc.ServicerContext) -> Any:
        config = self._bridge.call(
            functools.partial(self._dp.model_config, request.name, request.version or None, auth=_auth(context))
        )
        return codecs.model_config_to_pb(config)

    @_rpc
    def ModelStatistics(self, request: Any, context: grpc.ServicerContext) -> Any:
        stats = self._bridge.call(
            functools.partial(
                self._dp.model_statistics, request.name or None, request.version or None, auth=_auth(context)
            )
        )
        return codecs.model_statistics_to_pb(stats)

    @_rpc
    def RepositoryIndex(self, request: Any, context: grpc.ServicerContext) -> Any:
        index = self._bridge.call(
            functools.partial(self._dp.repository_index, ready_only=bool(request.ready), auth=_auth(context))
        )
        return codecs.repository_index_to_pb(index)

    @_rpc
    def RepositoryModelLoad(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._bridge.run(self._dp.load_model(request.model_name, auth=_auth(context)), context)
        return pb.RepositoryModelLoadResponse()

    @_rpc
    def RepositoryModelUnload(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._bridge.run(self._dp.unload_model(request.model_name, auth=_auth(context)), context)
        return pb.RepositoryModelUnloadResponse()

    def ModelStreamInfer(self, request_iterator: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        """Bidirectional stream: requests run concurrently; each answer (or error) is one message.

        As in Triton, an error does not end the stream: it comes back in
        ``error_message`` and the client matches answers to requests by ``id``.
        A caller the data plane refuses is refused once, when the stream opens.
        """
        auth = _auth(context)
        try:
            self._bridge.call(self._dp.authorize, "infer", auth)
        except FwxError as exc:
            code, message, _ = _status_of(exc)
            context.abort(code, message)
        yield from _Stream(self, request_iterator, context, auth).replies()

    async def stream_one(self, request: Any, deadline: float | None, auth: str | None) -> Any:
        """One request of a stream -> its reply message; never raises."""
        try:
            decode = _decoded(request, deadline)
            _, _, response = await self._dp.handle_infer(decode, auth=auth)
            return pb.ModelStreamInferResponse(infer_response=codecs.encode_infer_response(response))
        except (Exception, asyncio.CancelledError) as exc:  # noqa: BLE001 (an error is a reply; the stream goes on)
            reply = pb.ModelStreamInferResponse(error_message=_status_of(exc)[1])
            reply.infer_response.id = request.id
            return reply


class _Stream:
    """One ModelStreamInfer call: a reader thread submits requests, the handler yields replies in completion order."""

    _END = object()

    def __init__(
        self, servicer: InferenceServicer, requests: Iterator[Any], context: grpc.ServicerContext, auth: str | None
    ) -> None:
        self._servicer = servicer
        self._auth = auth
        self._requests = requests
        self._context = context
        self._replies: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._futures: set[concurrent.futures.Future[Any]] = set()
        self._lock = threading.Lock()

    def _read(self) -> None:
        submitted = 0
        try:
            for request in self._requests:
                fut = self._servicer._bridge.submit(
                    self._servicer.stream_one(request, _deadline(self._context), self._auth)
                )
                with self._lock:
                    self._futures.add(fut)
                fut.add_done_callback(self._replies.put)
                submitted += 1
        except Exception:  # the client cancelled or the stream broke: stop reading
            log.debug("ModelStreamInfer: request stream ended", exc_info=True)
        self._replies.put((self._END, submitted))

    def _cancel_all(self) -> None:
        with self._lock:
            for fut in self._futures:
                fut.cancel()
        self._replies.put((self._END, -1))

    def replies(self) -> Iterator[Any]:
        self._context.add_callback(self._cancel_all)
        threading.Thread(target=self._read, name="fwx-grpc-stream", daemon=True).start()
        done, total = 0, None
        while total is None or done < total:
            item = self._replies.get()
            if isinstance(item, tuple) and item[0] is self._END:
                total = item[1]
                if total < 0:
                    return
                continue
            with self._lock:
                self._futures.discard(item)
            done += 1
            if not item.cancelled():
                yield item.result()


class HealthServicer(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
    """``grpc.health.v1.Health``: SERVING once every model is loaded and warmed, until shutdown."""

    def __init__(self, dataplane: Any, bridge: LoopBridge) -> None:
        self._dp = dataplane
        self._bridge = bridge
        self._watchers = threading.BoundedSemaphore(MAX_HEALTH_WATCHERS)

    def _status(self, service: str) -> health_pb2.HealthCheckResponse.ServingStatus:
        if service not in SERVICE_NAMES:
            return health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
        ready = self._bridge.call(self._dp.ready)
        return health_pb2.HealthCheckResponse.SERVING if ready else health_pb2.HealthCheckResponse.NOT_SERVING

    @_rpc
    def Check(self, request: Any, context: grpc.ServicerContext) -> Any:
        status = self._status(request.service)
        if status == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN:
            raise NotFoundError(
                f"unknown service {request.service!r}", hint="check '' or 'inference.GRPCInferenceService'"
            )
        return health_pb2.HealthCheckResponse(status=status)

    def Watch(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        """Send the status now and again whenever it changes (polled: readiness has no event)."""
        if not self._watchers.acquire(blocking=False):
            code, message, _ = _status_of(UnavailableError("too many health Watch streams"))
            context.abort(code, message)
        ended = threading.Event()
        context.add_callback(ended.set)
        try:
            last = None
            while not ended.is_set():
                status = self._status(request.service)
                if status != last:
                    last = status
                    yield health_pb2.HealthCheckResponse(status=status)
                ended.wait(HEALTH_WATCH_PERIOD_S)
        finally:
            self._watchers.release()
