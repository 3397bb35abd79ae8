"""Refuse a chunked request whose chunk size is absurd, at once, and close the connection.

The HTTP parser (llhttp via httptools) accepts a chunk size up to 2**64-1 and
then waits for that many bytes: a request declaring ``FFFFFFFFFFFFFFFF`` got
no answer and held its connection open. The parser does not tell the
application the size it read, so ``ChunkScanner`` follows the message framing
of the raw stream alongside it (header block, Content-Length bodies, chunk
size lines, trailers) only to read each chunk size. A chunk larger than the
body limit is answered at once, with ``Connection: close``: 400 when the size
is not even a sane number (>= 2**63), 413 when it is merely over the limit.
When the scanner meets anything it does not follow it stops scanning that
connection and leaves the verdict to the parser; it never refuses valid
traffic.
"""

from __future__ import annotations

import orjson

_HEAD, _SIZE, _SKIP, _TRAILERS = range(4)
_MAX_LINE = 64 * 1024
_INSANE = 2**63


class ChunkScanner:
    """Feed it the bytes of one connection; it returns ``(status, message)`` for an absurd chunk size."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = True
        self._state = _HEAD
        self._buf = bytearray()
        self._left = 0
        self._after = _HEAD

    def feed(self, data: bytes) -> tuple[int, str] | None:
        view = memoryview(data)
        while self.active and len(view):
            if self._state == _SKIP:
                take = min(self._left, len(view))
                self._left -= take
                view = view[take:]
                if self._left == 0:
                    self._state = self._after
                continue
            self._buf += view
            view = memoryview(b"")
            verdict, rest = self._line_state()
            if verdict is not None:
                return verdict
            if rest is not None:
                view = memoryview(rest)
        return None

    def _stop(self) -> tuple[None, None]:
        self.active = False
        self._buf.clear()
        return None, None

    def _line_state(self) -> tuple[tuple[int, str] | None, bytes | None]:
        """Consume one header block / size line / trailer block from the buffer, if complete."""
        sep = b"\r\n" if self._state == _SIZE else b"\r\n\r\n"
        if self._state == _TRAILERS and self._buf[:2] == b"\r\n":
            end = 0
            sep = b"\r\n"
        else:
            end = self._buf.find(sep)
        if end < 0:
            return self._stop() if len(self._buf) > _MAX_LINE else (None, None)
        block, rest = bytes(self._buf[:end]), bytes(self._buf[end + len(sep) :])
        self._buf.clear()
        if self._state == _HEAD:
            self._on_head(block)
            return None, rest
        if self._state == _TRAILERS:
            self._state = _HEAD
            return None, rest
        return self._on_size(block), rest

    def _on_head(self, block: bytes) -> None:
        head = block.lower()
        chunked = _header(head, b"\r\ntransfer-encoding:").endswith(b"chunked")
        value = _header(head, b"\r\ncontent-length:")
        if value and not value.isdigit():
            self._stop()
            return
        length = int(value) if value else 0
        if chunked:
            self._state = _SIZE
        elif length:
            self._state, self._left, self._after = _SKIP, length, _HEAD

    def _on_size(self, line: bytes) -> tuple[int, str] | None:
        text = line.split(b";", 1)[0].strip()
        try:
            size = int(text, 16)
        except ValueError:
            self._stop()  # malformed: the parser answers it
            return None
        if size >= _INSANE:
            return 400, f"invalid chunk size {text[:20].decode('ascii', 'replace')!r} in a chunked request body"
        if size > self.limit:
            return 413, f"a chunk of {size} bytes exceeds the {self.limit}-byte request body limit"
        if size == 0:
            self._state = _TRAILERS
        else:
            self._state, self._left, self._after = _SKIP, size + 2, _SIZE
        return None


def _header(head: bytes, prefix: bytes) -> bytes:
    """The (stripped) value of the first header line starting with ``prefix`` in a lower-cased block."""
    at = head.find(prefix)
    if at < 0:
        return b""
    end = head.find(b"\r\n", at + len(prefix))
    return head[at + len(prefix) : end if end >= 0 else len(head)].strip()


_REASONS = {400: b"Bad Request", 413: b"Content Too Large"}


def error_bytes(status: int, message: str) -> bytes:
    body = orjson.dumps({"error": message})
    return b"".join(
        [
            b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status]),
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
            body,
        ]
    )
