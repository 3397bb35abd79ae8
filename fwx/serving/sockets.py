"""Binding server sockets: one place for the options every listener of fwx serve needs.

A port is owned by one ``fwx serve``. Its workers share the port through
SO_REUSEPORT, which the kernel grants to any process of the same user, so a
second server on the same port would silently take half the connections. The
supervisor therefore also claims the port: it binds the abstract unix socket
``fwx-port-<port>``, which only one process can hold and the kernel releases
when that process dies (no stale lock file). A second claim fails and names
the holder (its pid, from ``SO_PEERCRED`` on a connection to the claim).
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
from pathlib import Path

from fwx.errors import UsageError


class _ClaimedSocket(socket.socket):
    """A bound port plus its claim: closing the port releases the claim."""

    claim: socket.socket | None = None

    def close(self) -> None:
        if self.claim is not None:
            self.claim.close()
            self.claim = None
        super().close()


def bind_tcp(
    host: str,
    port: int,
    *,
    reuse_port: bool = False,
    claim: bool = False,
    what: str = "HTTP",
    flag: str = "--http-port",
) -> socket.socket:
    """Bind a listening socket ourselves so port 0 works and a busy port is a clear error.

    ``claim`` (the supervisor's reservation): also take the port's claim, so a
    second ``fwx serve`` on the same port fails instead of sharing it.
    ``proto=IPPROTO_TCP`` matters: asyncio only sets TCP_NODELAY on accepted
    sockets whose proto says TCP; without it, Nagle + delayed ACK add ~40 ms
    to every keep-alive request.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = _ClaimedSocket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:  # a worker of fwx serve: the kernel spreads connections over the workers
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        holder = _tcp_holder(port)
        raise UsageError(
            f"cannot listen for {what} on {host}:{port}: {exc.strerror}{holder}",
            hint=f"stop that process or choose another {flag} (0 = any free port, -1 disables {what})",
        ) from None
    if claim:
        try:
            sock.claim = claim_port(int(sock.getsockname()[1]), what=what, flag=flag)
        except UsageError:
            sock.close()
            raise
    sock.set_inheritable(True)
    return sock


def claim_port(port: int, *, what: str = "HTTP", flag: str = "--http-port") -> socket.socket:
    """Hold the abstract unix socket that says "this fwx serve owns ``port``"; refuse a held one."""
    name = f"\0fwx-port-{port}"
    lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        lock.bind(name)
    except OSError:
        lock.close()
        raise UsageError(
            f"port {port} ({what}) is already served by another fwx serve{_claim_holder(name)}",
            hint=f"stop that server or choose another {flag}",
        ) from None
    lock.listen(64)  # a listening claim lets the refused server read the holder's pid (SO_PEERCRED)
    return lock


def _claim_holder(name: str) -> str:
    """`` (pid N)`` for the process holding the claim ``name``, or nothing when it cannot be told."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(name)
            creds = probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        except OSError:
            return ""
    pid = struct.unpack("3i", creds)[0]
    return f" (pid {pid})" if pid > 0 else ""  # 0: the holder is in another pid namespace


def _tcp_holder(port: int) -> str:
    """``; held by pid N`` for the process listening on ``port`` (Linux /proc), or nothing."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                # local address is HEXIP:HEXPORT; state 0A is LISTEN
                if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return ""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                        return f"; held by pid {pid}"
    return ""
