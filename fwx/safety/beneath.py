"""Open a relative path strictly beneath a directory descriptor, never through a symlink.

``O_NOFOLLOW`` guards only the last component of a path: a writer that swaps a
folder on the way for a symlink (``renameat2(RENAME_EXCHANGE)``) between a check
and an open leads the open anywhere. ``openat2`` with ``RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`` (Linux 5.6+) makes the kernel
refuse every symlink and every escape during the one lookup. Where it is
missing (an older kernel, a seccomp profile that answers ``ENOSYS``), the walk
opens one component at a time from the previous descriptor with
``O_NOFOLLOW`` (and ``O_DIRECTORY`` for folders): the same guarantee, more
system calls.
"""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import PurePosixPath

from fwx.errors import UnsafeModelError

_SYS_OPENAT2 = 437  # the same number on x86_64 and aarch64 (the generic syscall table)
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


#: None until the first call tells whether this kernel (and seccomp profile) offers openat2.
_openat2_works: bool | None = None


def parts(rel: str) -> tuple[str, ...]:
    """The components of a relative path; ``UnsafeModelError`` for an absolute one or one with ``..``."""
    posix = PurePosixPath(rel.replace("\\", "/"))
    if not rel or posix.is_absolute() or ".." in posix.parts or not posix.parts:
        raise UnsafeModelError(f"{rel!r} is not a plain relative path", hint="name files inside the model's folder")
    return tuple(p for p in posix.parts if p != ".")


def open_beneath(dirfd: int, rel: str, flags: int = FILE_FLAGS, *, use_openat2: bool | None = None) -> int:
    """A new descriptor for ``rel`` beneath ``dirfd``; ``OSError`` (``ELOOP``, ``EXDEV``) on any symlink."""
    global _openat2_works
    names = parts(rel)
    want = _openat2_works is not False if use_openat2 is None else use_openat2
    if want:
        try:
            return _openat2(dirfd, "/".join(names), flags)
        except OSError as exc:
            if exc.errno not in (errno.ENOSYS, errno.EPERM) or use_openat2:
                raise
            _openat2_works = False  # a kernel or seccomp profile without it: walk instead, from now on
    return _walk(dirfd, names, flags)


def _openat2(dirfd: int, rel: str, flags: int) -> int:
    global _openat2_works
    libc = ctypes.CDLL(None, use_errno=True)
    how = _OpenHow(flags | os.O_CLOEXEC, 0, _RESOLVE)
    fd = libc.syscall(
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_int(dirfd),
        ctypes.c_char_p(os.fsencode(rel)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), rel)
    _openat2_works = True
    return int(fd)


def _walk(dirfd: int, names: tuple[str, ...], flags: int) -> int:
    """One ``openat`` per component, each from the descriptor before it, none following a link."""
    fd = dirfd
    try:
        for name in names[:-1]:
            nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
            if fd != dirfd:
                os.close(fd)
            fd = nxt
        return os.open(names[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    finally:
        if fd != dirfd:
            os.close(fd)


def is_link_refusal(exc: OSError) -> bool:
    """The errors a symlink or an escape on the way produces (``ELOOP``, ``EXDEV``; ``ENOTDIR`` for a folder)."""
    return exc.errno in (errno.ELOOP, errno.EXDEV, errno.ENOTDIR, errno.EMLINK)
