"""Linux namespaces: the loader gets a network, a ``/dev/shm`` and a process table of its own.

* a user namespace: what lets an unprivileged process create the others;
* a network namespace: only a loopback interface that is down, so no packet
  (TCP, UDP, raw, abstract unix socket) leaves the loader;
* a mount namespace: a private tmpfs on ``/dev/shm`` (the host's stays out of
  reach and nothing written there survives the loader) and a fresh ``/proc``;
* a PID namespace: the fresh ``/proc`` lists only the loader's own processes,
  so no other process's ``environ`` or ``cmdline`` can be read.

A new PID namespace applies to the children of the process that creates it,
so ``isolate`` forks: the child (PID 1 in its namespace) returns and goes on to
load; the parent stays behind, waits, and ends exactly as the child did.
Where the kernel or a container refuses (Docker's default seccomp profile
blocks ``unshare``), nothing is isolated and ``Isolation`` says why; the other
walls (Landlock, the seccomp filter, the limits) do not depend on this one.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 1 << 18
_PR_SET_PDEATHSIG, _PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 1, 24, 47, 4
_CAP_VERSION_3 = 0x20080522


@dataclass(frozen=True)
class Isolation:
    """Which namespaces this process runs in; ``reason`` says why the missing ones are missing."""

    network: bool = False
    shm: bool = False
    proc: bool = False
    reason: str = ""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _unshare(libc: ctypes.CDLL, network: bool) -> str:
    """Enter new user, (network,) mount and PID namespaces; '' on success, else why not."""
    uid, gid = os.getuid(), os.getgid()
    flags = (CLONE_NEWNET if network else 0) | CLONE_NEWNS | CLONE_NEWPID
    if libc.unshare(CLONE_NEWUSER | flags) == 0:
        try:  # map ourselves to ourselves: files keep their owners, and nobody gains a privilege
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
        except OSError as exc:
            return f"mapping the user namespace: {exc.strerror}"
        return ""
    first = os.strerror(ctypes.get_errno())
    if libc.unshare(flags) == 0:  # root without user namespaces (a privileged container)
        return ""
    return f"unshare: {first}"


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as fh:
        fh.write(text)


def _mount(libc: ctypes.CDLL, source: bytes, target: bytes, fstype: bytes, flags: int, data: bytes | None) -> bool:
    return int(libc.mount(source, target, fstype, flags, data)) == 0


def isolate(shm_bytes: int, *, network: bool = True) -> Isolation:
    """Move this (single-threaded) process into fresh namespaces; only the forked child returns.

    ``network=False`` keeps the host's network (a server's worker that binds its own ports)."""
    if sys.platform != "linux":
        return Isolation(reason="not Linux")
    libc = _libc()
    why = _unshare(libc, network)
    if why:
        return Isolation(reason=why)
    # private first: the mounts below must not propagate back to the host's mount table
    shm = _mount(libc, b"none", b"/", b"", _MS_REC | _MS_PRIVATE, None) and _mount(
        libc, b"tmpfs", b"/dev/shm", b"tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=1777,size={shm_bytes}".encode()
    )
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if not pid:
        die_with_parent(libc)
    if pid:
        try:
            _wait_and_mirror(pid)
        finally:  # whatever happens here, this process never goes on to load anything itself
            os._exit(1)
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    proc = _mount(libc, b"proc", b"/proc", b"proc", flags, None)
    missing = [name for name, up in (("/dev/shm", shm), ("/proc", proc)) if not up]
    reason = f"the kernel refused a private {' and '.join(missing)}" if missing else ""
    return Isolation(network=network, shm=shm, proc=proc, reason=reason)


def drop_capabilities() -> bool:
    """Give up every capability for good (root's too): no reading other processes' memory or ``environ``
    past their owner's wish (``CAP_SYS_PTRACE``), no new mounts. True when done."""
    if sys.platform != "linux":
        return False
    libc = _libc()
    try:
        last = int(Path("/proc/sys/kernel/cap_last_cap").read_text(encoding="ascii"))
    except (OSError, ValueError):
        last = 40
    for cap in range(last + 1):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)  # fails harmlessly once CAP_SETPCAP is gone
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable, twice (64 bits): all empty
    return int(libc.capset(header, data)) == 0


def die_with_parent(libc: ctypes.CDLL | None = None) -> None:
    """End (SIGKILL) when the process that started this one ends: no loader outlives its command."""
    if sys.platform == "linux":
        (libc or _libc()).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _wait_and_mirror(pid: int) -> None:
    """Stay behind while the loader runs, pass on a termination, then end as it ended."""
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's Ctrl-C reaches the loader itself
    for passed in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(passed, lambda signum, frame: os.kill(pid, signum))
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two cannot be handled, nor reset
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)
