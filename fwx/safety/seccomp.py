"""A seccomp filter: the loader creates no socket at all.

A network namespace already leaves a loader without a route anywhere, but not
every host has one (Docker's default profile refuses ``unshare``), and a
pathname unix socket (a stand-in for ``/var/run/docker.sock``) is reachable
from any network namespace: Landlock covers connecting to one only from ABI 9.
Nothing a loader does needs a socket (pipes and ``socketpair`` still work), so
``socket(2)`` fails with EACCES for every address family, and ``io_uring``,
which can create sockets without that call, is refused too. Syscalls of a
foreign ABI (32-bit entry, x32) are refused as a whole: a filter that checks
numbers must check them in the numbering it was written for.

A server's worker (``tcp_only``) must create its listening sockets: it may
create TCP sockets over IPv4 and IPv6 (protocol 0 or ``IPPROTO_TCP``, so not
SCTP or MPTCP, which Landlock's TCP rules do not cover) and nothing else: no
UDP, no raw or packet socket, no netlink, no unix socket (``socketpair``, which
asyncio uses for its wake-up, makes an unnamed pair and stays allowed).
Landlock then decides which ports it binds and that it connects nowhere.

The filter is a few BPF instructions built here, without libseccomp: it is
inherited by every child and cannot be removed.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct
from collections.abc import Mapping

#: machine -> AUDIT_ARCH value, and the numbers of the calls fwx refuses (or tests refuse) there
_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7, "riscv64": 0xC00000F3}
_GENERIC = {"socket": 198, "unshare": 97, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427}
SYSCALLS = {
    "x86_64": {**_GENERIC, "socket": 41, "unshare": 272},
    "aarch64": _GENERIC,
    "riscv64": _GENERIC,
}
_X32_BIT = 0x40000000
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K, _AND_K = 0x20, 0x15, 0x35, 0x06, 0x54
_NR, _ARCH_OFFSET = 0, 4
#: Offsets of socket(2)'s arguments (the low 32 bits, little-endian) in ``struct seccomp_data``.
_ARG0, _ARG1, _ARG2 = 16, 24, 32
_AF_INET, _AF_INET6, _SOCK_STREAM, _SOCK_TYPE_MASK, _IPPROTO_TCP = 2, 10, 1, 0xF, 6


class SeccompError(OSError):
    """The kernel refused the filter (or this machine's syscall numbers are not known here)."""


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def supported() -> bool:
    return platform.system() == "Linux" and platform.machine() in _ARCH


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def program(refused: Mapping[str, int], *, tcp_sockets: bool = False) -> bytes:
    """The filter as BPF: refuse a foreign ABI, and each named call with its errno; allow everything else.

    ``tcp_sockets``: ``socket(2)`` is allowed for TCP over IPv4 and IPv6 only, refused with EACCES otherwise."""
    numbers = SYSCALLS[platform.machine()]  # little-endian ABIs only (the AUDIT_ARCH values above)
    unsupported = _RET_ERRNO | errno.ENOSYS
    code = [
        _insn(_LD_W_ABS, 0, 0, _ARCH_OFFSET),
        _insn(_JEQ_K, 1, 0, _ARCH[platform.machine()]),
        _insn(_RET_K, 0, 0, unsupported),
        _insn(_LD_W_ABS, 0, 0, _NR),
        _insn(_JGE_K, 0, 1, _X32_BIT),
        _insn(_RET_K, 0, 0, unsupported),
    ]
    for name, err in refused.items():
        code += [_insn(_JEQ_K, 0, 1, numbers[name]), _insn(_RET_K, 0, 0, _RET_ERRNO | err)]
    if tcp_sockets:
        code += _tcp_only(numbers["socket"])
    code.append(_insn(_RET_K, 0, 0, _RET_ALLOW))
    return b"".join(code)


def _tcp_only(nr_socket: int) -> list[bytes]:
    """socket(AF_INET or AF_INET6, SOCK_STREAM [| flags], 0 or IPPROTO_TCP) falls through to allow; any other
    socket(2) returns EACCES; any other call skips the block (the accumulator still holds its number)."""
    refuse = _RET_ERRNO | errno.EACCES
    return [
        _insn(_JEQ_K, 0, 10, nr_socket),  # not socket(2): past this block (10 instructions)
        _insn(_LD_W_ABS, 0, 0, _ARG0),
        _insn(_JEQ_K, 1, 0, _AF_INET),
        _insn(_JEQ_K, 0, 6, _AF_INET6),  # neither family: to the refusal
        _insn(_LD_W_ABS, 0, 0, _ARG1),
        _insn(_AND_K, 0, 0, _SOCK_TYPE_MASK),  # SOCK_NONBLOCK and SOCK_CLOEXEC ride in the same word
        _insn(_JEQ_K, 0, 3, _SOCK_STREAM),
        _insn(_LD_W_ABS, 0, 0, _ARG2),
        _insn(_JEQ_K, 2, 0, 0),  # protocol 0: allowed
        _insn(_JEQ_K, 1, 0, _IPPROTO_TCP),
        _insn(_RET_K, 0, 0, refuse),
    ]


#: What a loader is refused: every socket, and io_uring (which makes sockets without socket(2)).
LOADER = {"socket": errno.EACCES, "io_uring_setup": errno.ENOSYS, "io_uring_enter": errno.ENOSYS}
LOADER |= {"io_uring_register": errno.ENOSYS}


def refuse_sockets() -> None:
    """Install the loader's filter on this process for good (inherited by every child)."""
    install(LOADER)


#: What a server's worker is refused: io_uring; sockets other than TCP (``program(tcp_sockets=True)``).
SERVER = {k: v for k, v in LOADER.items() if k != "socket"}


def tcp_only() -> None:
    """Install a server worker's filter on this process for good: TCP sockets only, no io_uring."""
    install(SERVER, tcp_sockets=True)


def install(refused: Mapping[str, int], *, tcp_sockets: bool = False) -> None:
    """Install a filter refusing ``refused`` (call name -> errno) on this process for good."""
    if not supported():
        raise SeccompError(errno.ENOSYS, f"no seccomp filter for {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    code = program(refused, tcp_sockets=tcp_sockets)
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _Prog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _error("prctl(NO_NEW_PRIVS)")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise _error("prctl(SECCOMP)")


def _error(call: str) -> SeccompError:
    import os

    code = ctypes.get_errno()
    return SeccompError(code, f"{call}: {os.strerror(code)}")
