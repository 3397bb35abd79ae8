"""The one mapping of an exception to a gRPC status, and the request metadata the servicers read.

The hint travels in trailing metadata (``fwx-hint``), whose values must be
printable ASCII: one ``µ`` or newline there and grpc replaces the whole answer
with ``INTERNAL "Invalid metadata"``. So ``status_of`` makes every hint
metadata-safe, and no servicer sets metadata by any other path. The status
message itself may hold any text (grpc percent-encodes it).
"""

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
#: Readable ASCII for the non-ASCII characters fwx's own messages use; anything else is escaped.
_SPELLED = str.maketrans({"µ": "u", "×": "x", "–": "-", "—": "-", "‘": "'", "’": "'", "“": '"', "”": '"', "…": "..."})


class Context(Protocol):
    """The part of ``grpc.aio.ServicerContext`` the servicers use (a protocol: tests can pass their own)."""

    def invocation_metadata(self) -> object: ...

    def time_remaining(self) -> float | None: ...

    def set_trailing_metadata(self, trailing_metadata: tuple[tuple[str, str], ...]) -> None: ...

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None: ...


def ascii_metadata(text: str) -> str:
    """``text`` as a valid metadata value: printable ASCII on one line (``µs`` -> ``us``, others ``\\xNN``)."""
    flat = " ".join(text.translate(_SPELLED).split())  # newlines and tabs are refused too
    return flat.encode("ascii", "backslashreplace").decode("ascii")


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str, str | None]:
    """(gRPC status, message, hint) of any exception; the hint is already metadata-safe."""
    if isinstance(exc, FwxError):
        code = getattr(grpc.StatusCode, exc.grpc_code, grpc.StatusCode.INTERNAL)
        return code, exc.message, ascii_metadata(exc.hint) if exc.hint else None
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
