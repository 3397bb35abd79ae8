"""Register the generated servicers with protobuf decoding that cannot end in INTERNAL.

grpcio decodes a request before the servicer sees it and answers a message it
cannot parse with ``INTERNAL: Exception deserializing request!``: a client
error reported as a server fault. Here every generated handler is re-registered
with the raw bytes passed through and decoded in a wrapper: bytes that are not
the method's message become ``INVALID_ARGUMENT`` naming the RPC. For the
inference RPCs the wrapper hands the servicer a ``BadMessage`` instead, so the
data plane refuses (and counts) it like any other undecodable request, after
checking the caller's token, exactly as REST does with a body that is not JSON.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

#: RPCs whose servicer takes a ``BadMessage`` (the data plane answers it); the rest are refused here.
INFERENCE_RPCS = frozenset({"ModelInfer", "ModelStreamInfer"})


class BadMessage:
    """Stands for a request message that did not parse (``id`` so a stream reply can echo it)."""

    id = ""

    def __init__(self, rpc: str) -> None:
        self.rpc = rpc

    @property
    def message(self) -> str:
        return f"the {self.rpc} request is not a valid protobuf message"


def parse_or_refuse(rpc: str, parse: Callable[[bytes], Any], raw: bytes) -> tuple[Any, str | None]:
    """``(message, None)``; for bytes that do not parse, ``(BadMessage, None)`` on an inference RPC
    (the data plane answers it) or ``(None, reason)`` for the caller to abort with INVALID_ARGUMENT."""
    try:
        return parse(raw), None
    except Exception:  # noqa: BLE001 - any parse failure is the client's bytes
        bad = BadMessage(rpc)
        return (bad, None) if rpc in INFERENCE_RPCS else (None, bad.message)


class _Capture:
    """Takes the place of a server for a generated ``add_*_to_server`` to see its handlers."""

    def __init__(self) -> None:
        self.services: dict[str, dict[str, Any]] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass  # rebuilt from the registered handlers below

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self.services[service] = handlers


def add_servicer(server: grpc.aio.Server, add_to_server: Callable[[Any, Any], None], servicer: Any) -> None:
    """``add_to_server(servicer, server)`` (a generated function), with safe request decoding."""
    capture = _Capture()
    add_to_server(servicer, capture)
    for service, handlers in capture.services.items():
        safe = {name: _safe(name, handler) for name, handler in handlers.items()}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, safe),))


def _safe(rpc: str, handler: Any) -> Any:
    """``handler`` taking raw bytes: it decodes them itself, refusing what does not parse."""
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
    streaming = handler.stream_stream  # the services have no client-streaming (stream_unary) RPC

    async def each(raws: AsyncIterator[bytes], context: Any) -> AsyncIterator[Any]:
        async for raw in raws:
            yield await decode(raw, context)

    async def stream_stream(raws: AsyncIterator[bytes], context: Any) -> AsyncIterator[Any]:
        async for reply in streaming(each(raws, context), context):
            yield reply

    return handler._replace(request_deserializer=None, stream_stream=stream_stream)
