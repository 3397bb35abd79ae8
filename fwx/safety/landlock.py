"""Landlock, the Linux security module that lets an unprivileged process give up file and network access.

Three system calls, called through ctypes: a maintained binding would add a
dependency for ~100 lines, and the PyPI ones (``landlock`` 1.0.0.dev5,
``landlockpy``) either stop at ABI 3 or are younger than this module; fwx needs
the network rules of ABI 4 and the scopes of ABI 6 where the kernel has them.
Everything is best effort in the kernel documentation's sense: fwx asks for
every right the running kernel knows, and nothing it does not.

A restriction is irrevocable and inherited by every child. Below ABI 8 it
covers only the calling thread and threads it starts afterwards, so
``restrict`` refuses to run in a process that already has more than one thread
(torch, TensorFlow and onnxruntime start thread pools when imported). From ABI 8
it asks for ``LANDLOCK_RESTRICT_SELF_TSYNC`` (every thread at once), and from
ABI 9 the file rights include connecting to pathname unix sockets.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from dataclasses import dataclass
from pathlib import Path

_SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446), "riscv64": (444, 445, 446)}
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_RULE_NET_PORT = 2
_PR_SET_NO_NEW_PRIVS = 38

# filesystem rights, by the ABI that introduced them
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV, RESOLVE_UNIX = 1 << 13, 1 << 14, 1 << 15, 1 << 16
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1, 9: (1 << 17) - 1}
#: landlock_restrict_self flag (ABI 8): the domain covers every thread of the process at once.
RESTRICT_SELF_TSYNC = 1 << 3
#: Rights that make sense on a file (not a directory); others on a file rule are EINVAL.
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
READ = EXECUTE | READ_FILE | READ_DIR
# network (ABI 4) and scopes (ABI 6)
BIND_TCP, CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1 << 0, 1 << 1


class LandlockError(OSError):
    """The kernel refused a Landlock call (or has no Landlock)."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _fields_ = [("allowed", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _numbers() -> tuple[int, int, int] | None:
    return _SYSCALLS.get(platform.machine())


def abi_version() -> int:
    """The Landlock ABI the kernel offers; 0 when it has none (or it is disabled at boot)."""
    nums = _numbers()
    if nums is None or platform.system() != "Linux":
        return 0
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    v = libc.syscall(ctypes.c_long(nums[0]), None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return int(v) if v > 0 else 0


def handled_fs(abi: int) -> int:
    return next(mask for level, mask in sorted(_FS_BY_ABI.items(), reverse=True) if abi >= level)


@dataclass(frozen=True)
class Rules:
    """What stays allowed once the process restricts itself; everything else the ABI covers is denied."""

    read: tuple[Path, ...] = ()
    write: tuple[Path, ...] = ()  # every filesystem right beneath these
    bind_ports: tuple[int, ...] = ()  # TCP ports it may bind; connecting out is denied (ABI >= 4)
    scope_signals: bool = True  # no signals to processes outside the sandbox (ABI >= 6)


def restrict(rules: Rules) -> int:
    """Apply ``rules`` to this process (and its future children) for good; returns the ABI used."""
    abi = abi_version()
    if abi < 1:
        raise LandlockError(errno.ENOSYS, "the kernel offers no Landlock")
    threads = len(os.listdir("/proc/self/task"))
    if threads > 1 and abi < 8:
        raise LandlockError(errno.EBUSY, f"{threads} threads are running; Landlock would cover only one of them")
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    create, add, restrict_self = _numbers() or (0, 0, 0)
    fs = handled_fs(abi)
    attr = _RulesetAttr(fs, (BIND_TCP | CONNECT_TCP) if abi >= 4 else 0, 0)
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX | (SCOPE_SIGNAL if rules.scope_signals else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else 16 if abi >= 4 else 8
    fd = libc.syscall(ctypes.c_long(create), ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        raise _error("landlock_create_ruleset")
    try:
        for path in rules.read:
            _add_path(libc, add, int(fd), path, READ & fs)
        for path in rules.write:
            _add_path(libc, add, int(fd), path, fs)
        for port in rules.bind_ports if abi >= 4 else ():
            net = _NetPort(BIND_TCP, port)
            if libc.syscall(ctypes.c_long(add), ctypes.c_int(fd), _RULE_NET_PORT, ctypes.byref(net), 0) < 0:
                raise _error(f"landlock_add_rule(port {port})")
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise _error("prctl(NO_NEW_PRIVS)")
        flags = RESTRICT_SELF_TSYNC if abi >= 8 else 0
        if libc.syscall(ctypes.c_long(restrict_self), ctypes.c_int(fd), ctypes.c_uint32(flags)) < 0:
            raise _error("landlock_restrict_self")
    finally:
        os.close(int(fd))
    return abi


def _add_path(libc: ctypes.CDLL, add: int, ruleset: int, path: Path, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a path this machine does not have grants nothing
    try:
        if not os.path.isdir(f"/proc/self/fd/{fd}"):
            access &= FILE_RIGHTS
        rule = _PathBeneath(access, fd)
        if libc.syscall(ctypes.c_long(add), ctypes.c_int(ruleset), _RULE_PATH_BENEATH, ctypes.byref(rule), 0) < 0:
            raise _error(f"landlock_add_rule({path})")
    finally:
        os.close(fd)


def _error(call: str) -> LandlockError:
    code = ctypes.get_errno()
    return LandlockError(code, f"{call}: {os.strerror(code)}")
