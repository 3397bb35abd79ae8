"""Linux namespaces: the loader gets a network, a ``/dev/shm`` and a process table of its own.

* a user namespace: what lets an unprivileged process create the others;
* a network namespace: only a loopback interface that is down, so no packet
  (TCP, UDP, raw, abstract unix socket) leaves the loader;
* a mount namespace: a private tmpfs on ``/dev/shm`` (the host's stays out of
  reach and nothing written there survives the loader) and a fresh ``/proc``;
* a PID namespace: the fresh ``/proc`` lists only the loader's own processes,
  so no other process's ``environ`` or ``cmdline`` can be read.

A new PID namespace applies to the children of the process that creates it,
so ``isolate`` forks twice: the first child is the namespace's PID 1, a
minimal init that only reaps orphans; the second (PID 2) returns and goes on
to load or serve. The loader is not PID 1 on purpose: the kernel drops every
signal a namespace's init has no handler for (a ``kill -SEGV`` it sends
itself, a SIGTERM before a server installs its handler), which would change
how the process ends. The parent stays behind, passes SIGTERM and SIGHUP on,
waits, and ends exactly as PID 2 did; then the init goes, and with it the
namespace.
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
from typing import Any

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 1 << 18
_PR_SET_PDEATHSIG, _PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 1, 24, 47, 4
_CAP_VERSION_3 = 0x20080522
#: The one capability a server binding a port below 1024 keeps.
CAP_NET_BIND_SERVICE = 10


@dataclass(frozen=True)
class Isolation:
    """Which namespaces this process runs in; ``reason`` says why the missing ones are missing."""

    network: bool = False
    shm: bool = False
    proc: bool = False
    reason: str = ""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _unshare(libc: ctypes.CDLL, network: bool, user: bool) -> str:
    """Enter new user, (network,) mount and PID namespaces; '' on success, else why not.

    ``user=False``: no user namespace (a server binding a port below 1024 needs its capability in the host's
    user namespace, which owns the host's network); only root can then create the others."""
    uid, gid = os.getuid(), os.getgid()
    flags = (CLONE_NEWNET if network else 0) | CLONE_NEWNS | CLONE_NEWPID
    if user and libc.unshare(CLONE_NEWUSER | flags) == 0:
        try:  # map ourselves to ourselves: files keep their owners, and nobody gains a privilege
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
        except OSError as exc:
            return f"mapping the user namespace: {exc.strerror}"
        return ""
    first = os.strerror(ctypes.get_errno()) if user else "no user namespace for a port below 1024"
    if libc.unshare(flags) == 0:  # root without user namespaces (a privileged container)
        return ""
    return f"unshare: {first}"


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as fh:
        fh.write(text)


def _mount(libc: ctypes.CDLL, source: bytes, target: bytes, fstype: bytes, flags: int, data: bytes | None) -> bool:
    return int(libc.mount(source, target, fstype, flags, data)) == 0


def isolate(
    shm_bytes: int, *, network: bool = True, user: bool = True, orphan_kill_after: float | None = None
) -> Isolation:
    """Move this (single-threaded) process into fresh namespaces; only the forked child returns.

    ``network=False`` keeps the host's network (a server's worker that binds its own ports).
    ``orphan_kill_after``: once the process that started this one is gone and a SIGTERM was passed on, the
    child is killed after this many seconds (a server's worker drains in that time, or is wedged)."""
    if sys.platform != "linux":
        return Isolation(reason="not Linux")
    libc = _libc()
    why = _unshare(libc, network, user)
    if why:
        return Isolation(reason=why)
    # private first: the mounts below must not propagate back to the host's mount table
    shm = _mount(libc, b"none", b"/", b"", _MS_REC | _MS_PRIVATE, None) and _mount(
        libc, b"tmpfs", b"/dev/shm", b"tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=1777,size={shm_bytes}".encode()
    )
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    init = os.fork()
    if not init:
        _be_init(libc)
    pid = os.fork()
    if not pid:
        die_with_parent(libc)
    if pid:
        try:
            _wait_and_mirror(pid, init, orphan_kill_after)
        finally:  # whatever happens here, this process never goes on to load anything itself
            os._exit(1)
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    proc = _mount(libc, b"proc", b"/proc", b"proc", flags, None)
    missing = [name for name, up in (("/dev/shm", shm), ("/proc", proc)) if not up]
    reason = f"the kernel refused a private {' and '.join(missing)}" if missing else ""
    return Isolation(network=network, shm=shm, proc=proc, reason=reason)


def drop_capabilities(keep: tuple[int, ...] = ()) -> bool:
    """Give up every capability for good (root's too), but those in ``keep``: no reading other processes'
    memory or ``environ`` past their owner's wish (``CAP_SYS_PTRACE``), no new mounts. True when done."""
    if sys.platform != "linux":
        return False
    libc = _libc()
    try:
        last = int(Path("/proc/sys/kernel/cap_last_cap").read_text(encoding="ascii"))
    except (OSError, ValueError):
        last = 40
    for cap in range(last + 1):
        if cap not in keep:
            libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)  # fails harmlessly once CAP_SETPCAP is gone
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    bits = [0, 0]
    for cap in keep:
        bits[cap // 32] |= 1 << (cap % 32)
    # effective, permitted, inheritable for capabilities 0-31, then for 32-63: only ``keep`` (kept if held)
    data = (ctypes.c_uint32 * 6)(bits[0], bits[0], 0, bits[1], bits[1], 0)
    return int(libc.capset(header, data)) == 0


def die_with_parent(libc: ctypes.CDLL | None = None, signum: int = signal.SIGKILL) -> None:
    """End (``signum``) when the process that started this one ends: no loader outlives its command."""
    if sys.platform == "linux":
        (libc or _libc()).prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)


def _be_init(libc: ctypes.CDLL) -> None:
    """PID 1 of the namespace: hold nothing, reap orphans, never return (killed when the loader ends)."""
    try:
        die_with_parent(libc)
        drop_capabilities()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)  # nobody waits for EOF on a pipe this process holds
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGCHLD, lambda signum, frame: _reap_all())
        while True:
            signal.pause()
    finally:
        os._exit(0)


def _reap_all() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def interrupt_passer(pid: int) -> Any:
    """A SIGINT handler for a process that waits on the loader ``pid``: pass the first SIGINT on, once.

    The terminal's Ctrl-C reaches the loader itself (it ends cleanly), so in the foreground of a terminal
    nothing is passed on; a SIGINT sent to the waiting process alone (kill -INT, timeout -s INT, a parent's
    send_signal) was swallowed here, and the export went on and published. Once only: every further SIGINT
    would land in the loader's own clean-up.
    """
    passed: list[bool] = []

    def handler(signum: int, frame: Any) -> None:
        if not passed and not _terminal_foreground():
            passed.append(True)
            os.kill(pid, signum)

    return handler


def _terminal_foreground() -> bool:
    """This process is in its terminal's foreground group: a Ctrl-C there went to the whole group."""
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
                return True
        except OSError:
            continue
    return False


def _wait_and_mirror(pid: int, init: int, orphan_kill_after: float | None = None) -> None:
    """Stay behind while the loader runs, pass on a termination, then end as it ended."""
    import resource

    drop_capabilities()  # waiting and passing on signals to its own children needs none
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    parent = os.getppid()
    signal.signal(signal.SIGINT, interrupt_passer(pid))

    def pass_on(signum: int, frame: Any) -> None:
        os.kill(pid, signum)
        # Orphaned (the parent-death signal): a child wedged in one C call that holds the GIL never runs its
        # SIGTERM handler, and would hold its ports with nobody left to stop it. The kernel delivers SIGKILL.
        if orphan_kill_after is not None and os.getppid() != parent and not signal.getitimer(signal.ITIMER_REAL)[0]:
            signal.signal(signal.SIGALRM, lambda signum, frame: os.kill(pid, signal.SIGKILL))
            signal.setitimer(signal.ITIMER_REAL, orphan_kill_after)

    for passed in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(passed, pass_on)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    os.kill(init, signal.SIGKILL)  # the namespace ends: whatever the loader left running there goes too
    os.waitpid(init, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two cannot be handled, nor reset
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)
