"""Reading an HTTP request body under a hard size limit (also after decompression).

Uvicorn has no body limit of its own, so every route that reads a body goes
through ``read_body``: a declared Content-Length over the limit is refused
before one byte is read, a chunked body is counted as it streams, and a
gzip/deflate body is inflated with a bounded output so a zip bomb stops at the
limit (Triton's --http-max-input-size semantics).
"""

from __future__ import annotations

import zlib
from typing import Any

from fwx.decimal_text import is_digits
from fwx.errors import InputError, PayloadTooLargeError


def _too_large(limit: int) -> PayloadTooLargeError:
    return PayloadTooLargeError(
        f"request body exceeds the {limit}-byte limit",
        hint="send a smaller request, use gRPC, or raise fwx serve --max-body-mb",
    )


async def read_body(request: Any, limit: int) -> bytes:
    """The (decompressed) body of a Starlette request, at most ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not is_digits(declared):
            raise InputError(f"invalid Content-Length {declared[:40]!r}")
        if int(declared) > limit:
            raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    encoding = (request.headers.get("content-encoding") or "identity").strip().lower()
    if encoding == "identity":
        return body
    if encoding in ("gzip", "x-gzip", "deflate"):
        return inflate(body, limit, encoding)
    raise InputError(f"unsupported Content-Encoding {encoding[:40]!r}", hint="send gzip, deflate or no encoding")


def inflate(body: bytes, limit: int, encoding: str = "gzip") -> bytes:
    """Decompress at most ``limit`` bytes; a body that would inflate further is a 413."""
    wbits = 16 + zlib.MAX_WBITS if "gzip" in encoding else zlib.MAX_WBITS | 32
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise InputError(f"request body is not valid {encoding}: {exc}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise _too_large(limit)
    if not inflater.eof:
        raise InputError(f"request body is truncated {encoding} data")
    return out
