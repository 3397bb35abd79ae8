"""uvicorn's httptools connection, with fwx's two changes: the chunk guard, and a drain that drops nothing.

Drain: on SIGTERM uvicorn closes an idle keep-alive connection at once and
marks a busy one to close after its current response. Both lose requests the
client had already sent: bytes still in the socket buffer, not yet read by the
loop, are thrown away with the connection, and a request pipelined behind the
busy one is never answered. Here a draining connection is closed only when
nothing more is pending on it: no request in progress, none pipelined, no
unread bytes in the socket. A request that starts while draining, with nothing
behind it, is answered with ``Connection: close``.
"""

from __future__ import annotations

import array
import fcntl
import logging
import termios
from typing import Any

from fwx.serving.rest.chunk_guard import ChunkScanner, error_bytes

log = logging.getLogger("fwx.serving.rest")


def unread_bytes(transport: Any) -> int:
    """Bytes the kernel holds for this connection that the loop has not read (0 when unknown)."""
    sock = transport.get_extra_info("socket")
    if sock is None or transport.is_closing():
        return 0
    count = array.array("i", [0])
    try:
        fcntl.ioctl(sock.fileno(), termios.FIONREAD, count, True)
    except OSError:
        return 0
    return int(count[0])


def http_protocol(limit: int) -> Any:
    """The protocol class for ``uvicorn.Config(http=...)``; ``None`` without httptools (uvicorn's own then)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - httptools is in the serve extra
        return None

    class FwxHttpProtocol(HttpToolsProtocol):  # type: ignore[misc]
        def connection_made(self, transport: Any) -> None:
            self._fwx_scanner = ChunkScanner(limit)
            self._fwx_draining = False
            super().connection_made(transport)

        def data_received(self, data: bytes) -> None:
            scanner = self._fwx_scanner
            verdict = scanner.feed(data) if scanner.active else None
            if verdict is None:
                super().data_received(data)
                return
            status, message = verdict
            log.warning("refused a request from %s: %s", self.client, message)
            self.transport.write(error_bytes(status, message))
            self.transport.close()

        def _fwx_pending(self) -> bool:
            busy = self.cycle is not None and not self.cycle.response_complete
            return busy or bool(self.pipeline) or unread_bytes(self.transport) > 0

        def shutdown(self) -> None:
            """Graceful stop: close now only if nothing was sent that is not answered yet."""
            self._fwx_draining = True
            if not self._fwx_pending():
                self.transport.close()

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            # The last request known on a draining connection: tell the client, then close after answering.
            if self._fwx_draining and not self.pipeline and unread_bytes(self.transport) == 0:
                self.cycle.keep_alive = False

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self._fwx_draining and not self.transport.is_closing() and not self._fwx_pending():
                self.transport.close()

    return FwxHttpProtocol
