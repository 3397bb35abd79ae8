"""Every wall this kernel offers, around the one process that loads untrusted models.

The scanners decide what a model may contain; the walls decide what the
process that loads it may reach if a scanner is ever wrong, or when the user
trusts the model's code (``--trust-model-code`` runs it inside the same walls).
The loader takes them, in this order, before it imports numpy or a framework:

1. an environment scrubbed of secrets (done by whoever starts it: the
   process's own ``/proc/self/environ`` is what it was started with);
2. namespaces (``fwx.safety.namespaces``): no network, a private ``/dev/shm``,
   a ``/proc`` that shows only its own processes;
3. a seccomp filter (``fwx.safety.seccomp``): no socket of any family;
4. memory and CPU-time limits (``fwx.safety.limits``);
5. Landlock (``fwx.safety.sandbox``): files, TCP, signals, abstract sockets.

``fwx serve``'s workers take the same walls in the same order
(``fwx.serving.worker_walls``) with ``Walls(network=False)``: they serve on the
host's network, so no network namespace, and the seccomp filter lets them
create TCP sockets only (Landlock then lets them bind their own ports and
connect nowhere); they have no CPU-time limit (a server runs for ever), the
supervisor kills a load that outlasts the probe timeout instead.

``report()`` says which walls are up in this process, for the export summary,
``fwx inspect`` and ``GET /v2``.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fwx.safety import limits, namespaces, seccomp

_PR_SET_DUMPABLE = 4
#: Set in the environment of a process started as the loader: it takes the walls itself.
LOADER_ENV = "FWX_LOADER"
#: Variables a loader keeps: what Python, the frameworks and the terminal need, nothing that names a secret.
_KEEP = {
    "PATH", "LANG", "LANGUAGE", "TZ", "TERM", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "CLICOLOR",
    "CLICOLOR_FORCE", "TMPDIR", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHASHSEED",
    "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONWARNINGS",
    "PYTHONFAULTHANDLER", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
    "HF_HOME", "HF_HUB_CACHE", "XDG_CACHE_HOME",  # where `fwx export org/name` finds the hub cache
    "USER", "LOGNAME",  # getpass.getuser() (torch's compile caches) without reading /etc/passwd
    "PYTHONNOUSERSITE", "PYTHONSAFEPATH", "PYTHONMALLOC", "PYTHONDEVMODE", "PYTHONASYNCIODEBUG",
    "POD_NAME", "HOSTNAME",  # a server's replica name in fwx_server_info (FWX_REPLICA is kept as FWX_*)
}  # fmt: skip
_KEEP_PREFIXES: tuple[str, ...] = (
    "LC_",
    "OMP_",
    "MKL_",
    "OPENBLAS_",
    "KMP_",
    "TF_",
    "TORCH_",
    "PYTORCH_",
    "ORT_",
    "XLA_",
)
_KEEP_PREFIXES += ("CUDA_", "CUDNN_", "CUBLAS_", "NVIDIA_", "FWX_", "KERAS_", "GRPC_")
_KEEP_PREFIXES += ("COVERAGE_",)  # a measured test run follows its processes
#: Names that carry secrets by convention, dropped even where a prefix above would keep them.
_SECRET = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION|^TF_VAR_", re.IGNORECASE)


def clean_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The variables a loader or a server's worker is started with: an allow-list, less anything named like
    a secret (``fwx.serving.spawn.worker_env`` also drops relative ``PYTHONPATH`` entries for workers)."""
    return {k: v for k, v in env.items() if (k in _KEEP or k.startswith(_KEEP_PREFIXES)) and not _SECRET.search(k)}


@dataclass(frozen=True)
class Walls:
    """The walls a loader is asked to take, built once from the command line."""

    limits: limits.Limits = field(default_factory=limits.defaults)
    require: bool = False
    #: False only with --no-sandbox: the model loads in the command's own process, with no wall.
    enabled: bool = True
    #: False for a process that serves on its own ports (``fwx serve``'s workers): no network namespace, and
    #: a socket filter that lets it create TCP sockets only (Landlock: bind its own ports, connect nowhere).
    network: bool = True
    #: A server binding a port below 1024: no user namespace (capabilities held there do not reach the host's
    #: network), and ``CAP_NET_BIND_SERVICE`` is the one capability kept.
    privileged_port: bool = False
    #: With no CPU-time limit (a server): the longest one load may take before the supervisor kills it.
    load_timeout_s: float | None = None
    #: A server's worker whose supervisor is gone: how long it may drain before it is killed (None: never).
    orphan_drain_s: float | None = None


@dataclass(frozen=True)
class Wall:
    name: str
    up: bool
    detail: str


@dataclass(frozen=True)
class WallsReport:
    """Which walls stand around this process's model loading."""

    walls: tuple[Wall, ...] = ()

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(w.name for w in self.walls if not w.up)

    @property
    def on(self) -> bool:
        return bool(self.walls) and not self.missing

    def as_json(self) -> dict[str, object]:
        return {
            "on": self.on,
            "walls": {w.name: {"up": w.up, "detail": w.detail} for w in self.walls},
            "missing": list(self.missing),
        }

    def line(self) -> str:
        """One line for a summary: the walls up, then the missing ones with why."""
        if not self.walls or not any(w.up for w in self.walls):
            return f"walls: NONE ({self.walls[0].detail if self.walls else 'no loader process'})"
        up = ", ".join(f"{w.name} {w.detail}" for w in self.walls if w.up)
        down = "; ".join(f"{w.name}: {w.detail}" for w in self.walls if not w.up)
        return f"walls: {up or 'none'}" + (f"; missing: {down}" if down else "")


_current = WallsReport()


def report() -> WallsReport:
    """The walls around this process (none in a process that took none, e.g. ``fwx serve``'s front)."""
    return _current


def enter(walls: Walls) -> namespaces.Isolation:
    """Take the walls that come before Landlock: namespaces, seccomp, limits. Single-threaded callers only.

    Forks (the PID namespace): only the child returns. Landlock comes after, once the snapshot exists
    (``finish``).
    """
    lim = walls.limits
    shm = max(64 << 20, (lim.memory_bytes or 4 << 30) // 4)  # a tmpfs fills memory the limits do not count
    # a server's worker drains on SIGTERM when its supervisor goes (the namespace's parent passes it on)
    namespaces.die_with_parent(signum=signal.SIGKILL if walls.network else signal.SIGTERM)
    iso = namespaces.isolate(
        shm, network=walls.network, user=not walls.privileged_port, orphan_kill_after=walls.orphan_drain_s
    )
    # after the mounts; as root, CAP_SYS_PTRACE would open the parent's environ
    namespaces.drop_capabilities(keep=(namespaces.CAP_NET_BIND_SERVICE,) if walls.privileged_port else ())
    global _seccomp_error
    try:
        if walls.network:
            seccomp.refuse_sockets()
        else:
            seccomp.tcp_only()
    except OSError as exc:
        _seccomp_error = exc.strerror or str(exc)
    limits.apply(lim)
    return iso


_seccomp_error: str | None = None


def finish(
    iso: namespaces.Isolation, walls: Walls, landlock_abi: int, landlock_reason: str, what: str = "the loader"
) -> WallsReport:
    """Record the walls now up (Landlock included) and, with ``require``, refuse to go on without one."""
    global _current
    no_sockets = _seccomp_error is None
    why_ns = iso.reason or "no namespaces"
    leaked = sorted(k for k in os.environ if _SECRET.search(k))  # measured, not assumed: who started us?
    lim = walls.limits
    shm_detail = "private tmpfs" if iso.shm else "host's, refused by Landlock" if landlock_abi else why_ns
    _current = WallsReport(
        (
            Wall("landlock", landlock_abi > 0, f"ABI {landlock_abi}" if landlock_abi else landlock_reason),
            _network(iso, walls, landlock_abi),
            Wall("unix-sockets", no_sockets or landlock_abi >= 9, _unix_detail(landlock_abi)),
            Wall("proc", iso.proc, "private" if iso.proc else f"{why_ns}: other processes' cmdline and environ"),
            Wall("shm", iso.shm or landlock_abi > 0, shm_detail),
            Wall("environment", not leaked, f"holds {', '.join(leaked)}" if leaked else "scrubbed"),
            Wall("memory", lim.memory_bytes is not None, limits.size_text(lim.memory_bytes)),
            _cpu_time(walls),
        )
    )
    if walls.require and _current.missing:
        from fwx.safety.sandbox import SandboxRequiredError

        lines = "; ".join(f"{w.name} ({w.detail})" for w in _current.walls if not w.up)
        raise SandboxRequiredError(
            f"--require-sandbox: {what} is missing walls: {lines}",
            hint="run where user namespaces and Landlock are allowed, or drop --require-sandbox",
        )
    return _current


def _network(iso: namespaces.Isolation, walls: Walls, landlock_abi: int) -> Wall:
    no_sockets = _seccomp_error is None
    if not walls.network:  # a server: TCP sockets only (seccomp), its own ports bound, no connection out
        if no_sockets and landlock_abi >= 4:
            return Wall("network", True, f"serves its own TCP ports only (seccomp + Landlock ABI {landlock_abi})")
        why = f"seccomp: {_seccomp_error}" if not no_sockets else f"Landlock ABI {landlock_abi} (TCP rules need 4)"
        return Wall("network", False, f"it serves on the host's network and {why}")
    detail = " + ".join(d for d, up in (("namespace", iso.network), ("seccomp", no_sockets)) if up)
    return Wall("network", bool(detail), detail or f"{iso.reason or 'no namespaces'}; seccomp: {_seccomp_error}")


def _unix_detail(landlock_abi: int) -> str:
    if _seccomp_error is None:
        return "seccomp"
    return f"Landlock ABI {landlock_abi}" if landlock_abi >= 9 else f"seccomp: {_seccomp_error}"


def _cpu_time(walls: Walls) -> Wall:
    cpu = walls.limits.cpu_seconds
    if cpu is None and walls.load_timeout_s is not None:  # a server runs for ever: its loads are timed instead
        return Wall("cpu-time", True, f"each load {walls.load_timeout_s:g}s (a server has no lifetime CPU limit)")
    return Wall("cpu-time", cpu is not None, limits.duration_text(cpu))


def down(why: str) -> WallsReport:
    """Record that this process loads with every wall down (``--no-sandbox``)."""
    global _current
    names = ("landlock", "network", "unix-sockets", "proc", "shm", "environment", "memory", "cpu-time")
    _current = WallsReport(tuple(Wall(n, False, why) for n in names))
    return _current


def in_loader() -> bool:
    """True in a process started as the loader (it takes the walls itself, and starts no other loader)."""
    return os.environ.get(LOADER_ENV) == "1"


def run_loader(walls: Walls) -> int:
    """Run this same command line again as the loader, behind the walls, and wait for it.

    The loader writes to this process's terminal itself (progress, tables, ``--json``); this process
    only waits and returns its exit code, or raises the limit that ended it.
    """
    import shutil
    import sys
    import tempfile

    argv = [sys.executable, *sys.orig_argv[1:]]
    # The loader's snapshots and scratch folder go in a folder of ours: once Landlock is on, the loader
    # may not remove entries of the shared temp folder, so its own atexit clean-up left a copy of the
    # model behind on every run; this process removes it after the loader ends, however it ended.
    home = Path(tempfile.mkdtemp(prefix="fwx-loader-"))
    env = clean_environment(os.environ) | {LOADER_ENV: "1", "TMPDIR": str(home)}
    try:
        return _wait_loader(argv, env, walls)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _wait_loader(argv: list[str], env: dict[str, str], walls: Walls) -> int:
    import subprocess
    import sys

    from fwx.errors import FwxError, StoppedError

    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    # Our /proc/<pid>/environ holds the secrets the loader's lacks: readable only with CAP_SYS_PTRACE,
    # which the loader gives up (Landlock alone leaves environ readable to a same-user process).
    import ctypes

    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    proc = subprocess.Popen(argv, env=env)  # noqa: S603 - our own interpreter and command line, no shell
    old_int = signal.signal(signal.SIGINT, namespaces.interrupt_passer(proc.pid))
    stopped: list[int] = []

    def pass_on(signum: int, frame: object) -> None:
        stopped.append(signum)
        proc.send_signal(signum)

    old_term = signal.signal(signal.SIGTERM, pass_on)
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig in stopped:  # fwx itself was told to stop, and passed it on: not a fault of the model
            raise StoppedError(f"stopped by {signal.Signals(sig).name} before the model's loader finished")
        hit = limits.killed_by(sig, usage.ru_utime + usage.ru_stime, walls.limits)
        if hit is not None:
            raise hit
        raise FwxError(
            f"the model's loader was killed by {signal.Signals(sig).name}",
            hint=f"if the machine ran out of memory, lower {limits.MEMORY_OPTION}; rerun with --debug for details",
        )
    return proc.returncode
