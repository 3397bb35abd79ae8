"""Crash-safe loading: try an untrusted artifact in a throw-away child process first.

Native parsers (TFLite's FlatBuffer reader, onnxruntime's protobuf reader, TF's
graph loader) can crash the whole process on a crafted file: an 8-byte
``.tflite`` (``b"\\x18\\x00\\x00\\x00TFL3"``) reads out of bounds (TF #115308). So the
server first loads the artifact, and runs one warm-up inference, in a child
``python -m fwx.serving.loader_probe FORMAT PATH`` under RLIMITs (address space,
CPU seconds, no core file) and a wall-clock timeout. A child killed by a signal
or exiting non-zero rejects the version; only a clean exit lets the server load
it in-process. The child runs on CPU only, so it never takes GPU memory.

A fresh child pays its framework's import again (TensorFlow ~5 s), which made a
hot reload cost more than a cold start. So a serving process keeps one *spare*
child per format it serves (``keep_warm``): started after the server is ready,
it imports the framework, loads and warms up an artifact the server already
serves (known good; skipped if a job is already waiting), then blocks on its
stdin. A trial load hands it the new artifact as one JSON line; the spare is
used once and exits (its verdict is the same exit-code contract), so one
artifact's trial never shares a process with another's, and a new spare is
started once the new version has loaded. A spare that died or got stuck before
its job is never blamed on the artifact: without its "job taken" line the trial
is rerun in a fresh child. Every child exits right after its verdict, without
the interpreter's teardown (seconds with torch loaded, and no part of the test).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fwx.errors import FwxError, InputError
from fwx.formats import Format
from fwx.machine import signal_name
from fwx.signature import Signature

MARKER = "FWX-PROBE "
#: A spare prints this once it has read its job: a death after it is the artifact's doing.
JOB_TAKEN = "FWX-PROBE-JOB"
#: Exit code of a child that refused the model cleanly (an FwxError).
REFUSED = 3
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_CPU_S = 120
#: Address space cap; TensorFlow alone maps ~1.7 GB of virtual memory once imported.
DEFAULT_MEMORY_MB = 8192


#: Probe children now running, so a shutting-down server can kill them instead of waiting.
_ACTIVE: set[subprocess.Popen[str]] = set()
#: Probe children we killed (or that took the terminal's Ctrl-C): stopped, not crashed.
_CANCELLED: set[int] = set()
#: Idle pre-imported children, one per format (``keep_warm``); taken by ``probe`` under ``_SPARE_LOCK``.
_SPARES: dict[Format, subprocess.Popen[str]] = {}
_SPARE_LOCK = threading.Lock()
#: Trial loads judged by a spare child ("spare") or a fresh one ("fresh"), for tests and the curious.
runs: Counter[str] = Counter()


def kill_active_probes() -> None:
    """Kill every probe child still running, and the idle spares (the server is stopping)."""
    for proc in list(_ACTIVE):
        _CANCELLED.add(proc.pid)
        with contextlib.suppress(OSError):
            proc.kill()
    with _SPARE_LOCK:
        spares = list(_SPARES.values())
        _SPARES.clear()
    for proc in spares:
        _reap(proc)


def _reap(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(OSError, subprocess.TimeoutExpired, ValueError):
        proc.kill()
        proc.communicate(timeout=10)


@dataclass(frozen=True)
class ProbeLimits:
    timeout_s: float = DEFAULT_TIMEOUT_S
    cpu_s: int = DEFAULT_CPU_S
    memory_mb: int = DEFAULT_MEMORY_MB


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = ""  # probe on CPU: the parser is the same, the GPU stays free
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _command(
    fmt: Format,
    path: Path,
    signature: Signature | None,
    trust_model_code: bool,
    lim: ProbeLimits,
    sizes: Mapping[str, int] | None = None,
) -> list[str]:
    cmd = [sys.executable, "-P", "-m", "fwx.serving.loader_probe", fmt.value, str(path)]  # -P: not the cwd
    cmd += ["--cpu-s", str(lim.cpu_s), "--memory-mb", str(lim.memory_mb)]
    if signature is not None:
        cmd += ["--signature", json.dumps(signature.to_json())]
    if sizes:
        cmd += ["--sizes", json.dumps(dict(sizes))]
    if trust_model_code:
        cmd.append("--trust-model-code")
    return cmd


def keep_warm(
    fmt: Format,
    known_good: Path,
    *,
    signature: Signature | None = None,
    trust_model_code: bool = False,
    limits: ProbeLimits | None = None,
    sizes: Mapping[str, int] | None = None,
) -> None:
    """Start the spare child of ``fmt`` unless one is alive; it warms up on ``known_good`` (already served)."""
    lim = limits or ProbeLimits()
    with _SPARE_LOCK:
        old = _SPARES.get(fmt)
        if old is not None and old.poll() is None:
            return
        _SPARES[fmt] = subprocess.Popen(
            [*_command(fmt, known_good, signature, trust_model_code, lim, sizes), "--spare"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_child_env(),
        )
    if old is not None:
        _reap(old)


def drop_spares(keep: set[Format]) -> None:
    """Stop the spares of formats no longer served (a model's new version came in another format)."""
    with _SPARE_LOCK:
        gone = [_SPARES.pop(f) for f in list(_SPARES) if f not in keep]
    for proc in gone:
        _reap(proc)


def spare_formats() -> list[Format]:
    """Formats with a live spare child (for tests and logs)."""
    with _SPARE_LOCK:
        return [f for f, p in _SPARES.items() if p.poll() is None]


def _take_spare(fmt: Format) -> subprocess.Popen[str] | None:
    with _SPARE_LOCK:
        proc = _SPARES.pop(fmt, None)
    if proc is not None and proc.poll() is not None:
        _reap(proc)  # died while idle (OOM killer, its warm-up artifact deleted): not this artifact's fault
        return None
    return proc


class _SpareUnusable(Exception):
    """The spare died or stuck before it read its job (its own warm-up): no verdict on the artifact."""


def probe(
    fmt: Format,
    path: Path,
    *,
    signature: Signature | None = None,
    trust_model_code: bool = False,
    limits: ProbeLimits | None = None,
    use_spare: bool = True,
    sizes: Mapping[str, int] | None = None,
) -> float:
    """Load (and warm up) ``path`` in a child process; return its wall time in seconds.

    Uses the spare child of ``fmt`` when there is one (``keep_warm``) and
    ``use_spare``, else a fresh one. Raises ``InputError`` with reason "loader
    crashed (SIGSEGV)", "loader timed out" or the child's own one-line error.
    Blocking: call it from a thread.
    """
    lim = limits or ProbeLimits()
    spare = _take_spare(fmt) if use_spare else None
    start = time.monotonic()
    try:
        proc, stdout, stderr = _trial(fmt, path, signature, trust_model_code, lim, spare, sizes)
    except _SpareUnusable:
        return probe(
            fmt, path, signature=signature, trust_model_code=trust_model_code, limits=lim, use_spare=False, sizes=sizes
        )
    seconds = time.monotonic() - start
    runs["spare" if spare is not None else "fresh"] += 1
    _judge(proc, stdout, stderr, path, fmt)
    return seconds


def _trial(
    fmt: Format,
    path: Path,
    signature: Signature | None,
    trust_model_code: bool,
    lim: ProbeLimits,
    spare: subprocess.Popen[str] | None,
    sizes: Mapping[str, int] | None = None,
) -> tuple[subprocess.Popen[str], str, str]:
    """Run the trial in ``spare`` (the job goes in on stdin) or in a fresh child; wait for its exit."""
    job = None
    if spare is not None:
        sig = json.dumps(signature.to_json()) if signature is not None else ""
        job = json.dumps(
            {
                "path": str(path),
                "signature": sig,
                "sizes": json.dumps(dict(sizes or {})),
                "trust_model_code": trust_model_code,
                "cpu_s": lim.cpu_s,
            }
        )
    proc = spare or subprocess.Popen(
        _command(fmt, path, signature, trust_model_code, lim, sizes),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=_child_env(),
    )
    _ACTIVE.add(proc)
    try:
        stdout, stderr = proc.communicate(job + "\n" if job is not None else None, timeout=lim.timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, _ = proc.communicate()
        if spare is not None and JOB_TAKEN not in (stdout or ""):
            raise _SpareUnusable from None
        raise InputError(
            f"loader timed out after {lim.timeout_s:g}s on {path.name} ({fmt})",
            hint="the artifact may be hostile or too big; raise the probe timeout if it is legitimate",
        ) from None
    finally:
        _ACTIVE.discard(proc)
    cancelled = proc.pid in _CANCELLED or proc.returncode in (-signal.SIGINT, -signal.SIGTERM)
    if spare is not None and not cancelled and proc.returncode != 0 and JOB_TAKEN not in stdout:
        raise _SpareUnusable
    return proc, stdout, stderr


def _judge(proc: subprocess.Popen[str], stdout: str, stderr: str, path: Path, fmt: Format) -> None:
    """Exit 0 passes; a kill by us is a stop; a signal is a crash; anything else is the child's refusal."""
    if proc.pid in _CANCELLED or proc.returncode in (-signal.SIGINT, -signal.SIGTERM):
        _CANCELLED.discard(proc.pid)
        raise InputError(
            f"trial load of {path.name} ({fmt}) stopped: the server is shutting down",
            hint="nothing is wrong with the artifact",
        )
    if proc.returncode < 0:
        raise InputError(
            f"loader crashed ({signal_name(-proc.returncode)}) on {path.name} ({fmt})",
            hint="the artifact is corrupt or hostile; re-export it",
        )
    if proc.returncode != 0:
        raise InputError(
            _child_error(stdout, stderr, proc.returncode, path, fmt),
            hint="the artifact is corrupt or does not match its signature; re-export it",
        )


def _child_error(stdout: str, stderr: str, code: int, path: Path, fmt: Format) -> str:
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            try:
                return str(json.loads(line[len(MARKER) :]).get("error", "")) or f"loader refused {path.name}"
            except ValueError:
                break
    tail = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    why = tail[-1][:200] if tail else "no message"
    if code == 137 or "MemoryError" in stderr:
        return f"loader ran out of memory on {path.name} ({fmt})"
    return f"loader failed (exit {code}) on {path.name} ({fmt}): {why}"


def _set_limits(cpu_s: int, memory_mb: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _set_cpu_limit(cpu_s)
    if memory_mb > 0:
        cap = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def _set_cpu_limit(cpu_s: int) -> None:
    """``cpu_s`` more CPU seconds from now (a spare has already spent some on its import)."""
    import resource

    if cpu_s > 0:
        used = resource.getrusage(resource.RUSAGE_SELF)
        cap = int(used.ru_utime + used.ru_stime) + 1 + cpu_s
        resource.setrlimit(resource.RLIMIT_CPU, (cap, cap))


def _run(args: argparse.Namespace) -> dict[str, object]:
    from fwx.runtimes.base import load_runtime, warmup

    if getattr(args, "manifest", False):
        from fwx.manifest import Manifest

        manifest = Manifest.read(Path(args.path).parent)
        args.signature = json.dumps(manifest.sig().to_json())
        args.sizes = json.dumps(manifest.warmup_sizes())
    sig = Signature.from_json(json.loads(args.signature)) if args.signature else None
    start = time.monotonic()
    rt = load_runtime(
        Format(args.format), args.path, device="cpu", trust_model_code=args.trust_model_code, signature_hint=sig
    )
    try:
        loaded = time.monotonic() - start
        if sig is not None:
            warmup(rt, sig, {str(k): int(v) for k, v in json.loads(args.sizes or "{}").items()})
    finally:
        rt.close()
    return {"ok": True, "load_s": round(loaded, 4), "total_s": round(time.monotonic() - start, 4)}


def _take_job(args: argparse.Namespace) -> bool:
    """Spare mode: import the framework, warm up on the known-good ``args.path`` unless a job is
    already waiting, then read the job from stdin.

    Returns False when the server went away (stdin closed) without sending one.
    """
    import importlib
    import select

    from fwx.runtimes.base import runtime_class, runtime_entry

    try:
        fmt = Format(args.format)
        runtime_class(fmt)
        importlib.import_module(runtime_entry(fmt).package)  # some runtimes import theirs only on load
        if not select.select([sys.stdin], [], [], 0)[0]:
            _run(args)  # first-load costs (lazy imports, kernel set-up) paid now, not by the trial
    except BaseException:  # noqa: BLE001 - an unusable spare exits without JOB_TAKEN; the server retries fresh
        sys.exit(4)
    line = sys.stdin.readline()
    if not line.strip():
        return False
    job = json.loads(line)
    print(JOB_TAKEN, flush=True)
    args.path = job["path"]
    args.signature = job["signature"]
    args.sizes = job.get("sizes", "")
    args.trust_model_code = bool(job["trust_model_code"])
    _set_cpu_limit(int(job["cpu_s"]))
    return True


def _walls(repository: Path, *, require: bool) -> None:
    """The walls of a loader (a trusted artifact's code runs here too): namespaces, no socket, Landlock
    reading ``repository``. Its memory and CPU limits are set by ``_set_limits``, as for any probe: a
    limit ends it with a signal, which is the verdict."""
    from fwx.safety import limits, walls
    from fwx.safety.sandbox import Policy, enter, status

    want = walls.Walls(limits=limits.Limits(None, None))
    iso = walls.enter(want)
    enter(Policy(read=(repository,), shm=iso.shm), require=require, what="the trial load", warn=False)
    walls.finish(iso, want, status.abi, status.reason, what="the trial load")


def main(argv: list[str] | None = None) -> int:
    """Child entry point: exit 0 = loadable, 3 = refused with a message, a signal = crashed."""
    ap = argparse.ArgumentParser(prog="python -m fwx.serving.loader_probe")
    ap.add_argument("format", choices=[f.value for f in Format])
    ap.add_argument("path")
    ap.add_argument("--signature", default="")
    ap.add_argument("--sizes", default="", help="JSON: warm-up size of each dim the model restricts")
    ap.add_argument("--trust-model-code", action="store_true")
    ap.add_argument("--cpu-s", type=int, default=DEFAULT_CPU_S)
    ap.add_argument("--memory-mb", type=int, default=DEFAULT_MEMORY_MB)
    ap.add_argument("--spare", action="store_true", help="warm up on PATH, then read the job from stdin")
    ap.add_argument("--sandbox-read", default="", help="enter the sandbox first, reading only this folder")
    ap.add_argument("--require-sandbox", action="store_true")
    ap.add_argument("--manifest", action="store_true", help="signature and warm-up sizes from PATH's fwx.json")
    args = ap.parse_args(argv)
    if args.sandbox_read:  # started by the supervisor, outside any worker's walls: take its own
        _walls(Path(args.sandbox_read), require=args.require_sandbox)
    _set_limits(0 if args.spare else args.cpu_s, args.memory_mb)
    if args.spare and not _take_job(args):
        return 0
    try:
        result = _run(args)
    except FwxError as exc:
        print(MARKER + json.dumps({"ok": False, "error": exc.message}), flush=True)
        return REFUSED
    except MemoryError:
        print(
            MARKER + json.dumps({"ok": False, "error": f"loader ran out of memory on {Path(args.path).name}"}),
            flush=True,
        )
        return REFUSED
    print(MARKER + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    # The verdict is in (load, warm-up and close all ran): skip the interpreter's teardown, which with
    # torch loaded took seconds here (thread pools, module finalisers) and judged nothing about the artifact.
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
