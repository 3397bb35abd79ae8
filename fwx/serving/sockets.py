"""Binding server sockets: one place for the options every listener of fwx serve needs."""

from __future__ import annotations

import socket

from fwx.errors import UsageError


def bind_tcp(
    host: str, port: int, *, reuse_port: bool = False, what: str = "HTTP", flag: str = "--http-port"
) -> socket.socket:
    """Bind a listening socket ourselves so port 0 works and a busy port is a clear error.

    ``proto=IPPROTO_TCP`` matters: asyncio only sets TCP_NODELAY on accepted
    sockets whose proto says TCP; without it, Nagle + delayed ACK add ~40 ms
    to every keep-alive request.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:  # a worker of fwx serve --workers N: the kernel spreads connections over the workers
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UsageError(
            f"cannot listen for {what} on {host}:{port}: {exc.strerror}",
            hint=f"choose another {flag} (0 = any free port, -1 disables {what})",
        ) from None
    sock.set_inheritable(True)
    return sock
