"""The one mapping of an exception to a gRPC status, and the request metadata the servicers read."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from typing import Protocol

import grpc

from fwx.errors import FwxError

log = logging.getLogger("fwx.serving.grpc")

HINT_KEY = "fwx-hint"
_NO_DEADLINE_S = 1e8  # grpc reports "no deadline" as a huge time_remaining()


class Context(Protocol):
    """The part of ``grpc.aio.ServicerContext`` the servicers use (a protocol: tests can pass their own)."""

    def invocation_metadata(self) -> object: ...

    def time_remaining(self) -> float | None: ...

    def set_trailing_metadata(self, trailing_metadata: tuple[tuple[str, str], ...]) -> None: ...

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None: ...


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str, str | None]:
    """(gRPC status, message, hint) of any exception."""
    if isinstance(exc, FwxError):
        code = getattr(grpc.StatusCode, exc.grpc_code, grpc.StatusCode.INTERNAL)
        return code, exc.message, exc.hint
    if isinstance(exc, (concurrent.futures.CancelledError, asyncio.CancelledError)):
        return grpc.StatusCode.CANCELLED, "the request was cancelled", None
    log.error("gRPC request failed", exc_info=exc)
    return grpc.StatusCode.INTERNAL, f"internal error ({type(exc).__name__}); see the server log", None


async def abort_with(context: Context, exc: BaseException) -> None:
    """End the RPC with ``exc``'s status (and its hint in ``fwx-hint``); raises, as ``context.abort`` does."""
    code, message, hint = status_of(exc)
    if hint:
        context.set_trailing_metadata(((HINT_KEY, hint),))
    await context.abort(code, message)


def metadata_value(context: Context, key: str) -> str | None:
    for item in context.invocation_metadata() or ():  # type: ignore[attr-defined]
        if item[0] == key:
            value = item[1]
            return value.decode("latin-1") if isinstance(value, bytes) else str(value)
    return None


def auth_of(context: Context) -> str | None:
    """The ``authorization`` metadata as sent; the data plane parses and checks it."""
    return metadata_value(context, "authorization")


def deadline_of(context: Context) -> float | None:
    """The RPC's deadline on ``time.monotonic()``'s clock (None when the client set none)."""
    remaining = context.time_remaining()
    return None if remaining is None or remaining > _NO_DEADLINE_S else time.monotonic() + remaining
