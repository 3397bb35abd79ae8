"""Starting ``fwx serve``'s worker processes early, before the supervisor knows what they will serve.

A worker's first ~0.2 s (interpreter, numpy, asyncio, the web stack) needs no
configuration, so ``fwx serve`` starts its workers before it imports the
server configuration, checks the repository and reserves the ports; the two
overlap on two cores. The worker then blocks on its stdin for one pickled
``Job`` (run directory, slot, supervisor pid, wake-up fd, ServerConfig). If the
supervisor gives up first (a usage error, a signal), it closes the pipe and the
worker exits 0 without a word.

This module imports nothing heavy: the ``serve`` command imports it first.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fwx.errors import UsageError
from fwx.machine import usable_cores


def parse_workers(text: str | int) -> int:
    """``"auto"`` = the CPUs this process may run on; otherwise a positive integer."""
    if isinstance(text, int):
        n = text
    elif text.strip().lower() == "auto":
        return usable_cores()
    else:
        try:
            n = int(text)
        except ValueError:
            raise UsageError(f"--workers {text!r} is not a number", hint="use a positive integer or auto") from None
    if n < 1:
        raise UsageError(f"--workers must be at least 1, got {n}", hint="use a positive integer or auto")
    return n


#: fwx's own secrets: never in a worker's or a probe child's environment (they get the token over a pipe).
SECRET_ENV = ("FWX_API_TOKEN", "FWX_ADMIN_TOKEN")


def worker_env(n: int, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The workers' environment: an allow-list of the caller's, and with N > 1 cores / N compute threads each.

    Every runtime defaults to one intra-op thread per core; N workers doing that
    would run N x cores threads on the cores. ``FWX_THREADS`` sizes onnxruntime's
    pool; torch reads ``OMP_NUM_THREADS``, TensorFlow ``TF_NUM_INTRAOP_THREADS``.
    A worker runs untrusted models: what it does not need from the caller's
    environment (tokens, cloud credentials) it never sees
    (``fwx.safety.walls.clean_environment``, the loader's allow-list).
    """
    from fwx.safety.walls import clean_environment  # the loader's allow-list: one list for both

    env = clean_environment(os.environ if environ is None else environ)
    if "PYTHONPATH" in env:  # an empty or relative entry would put the working directory on sys.path
        env["PYTHONPATH"] = os.pathsep.join(p for p in env["PYTHONPATH"].split(os.pathsep) if os.path.isabs(p))
    if n > 1:
        threads = str(max(1, parse_workers("auto") // n))
        for name in ("FWX_THREADS", "OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS"):
            env.setdefault(name, threads)
    return env


@dataclass(frozen=True)
class Job:
    """What one worker serves; written by the supervisor to the worker's stdin."""

    root: Path
    slot: int
    supervisor_pid: int
    wake_fd: int
    config: Any  # fwx.serving.config.ServerConfig (not imported here: this module stays light)


class Spawner:
    """Starts worker processes and hands each its job; owns the wake-up pipe they write to."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        # Workers write a byte here when their readiness changes: the supervisor wakes at once.
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self._early: list[subprocess.Popen[bytes]] = []
        self._closed = False

    def start(self) -> subprocess.Popen[bytes]:
        """A fresh worker, waiting for its job on stdin."""
        # Own process group: a terminal's Ctrl-C reaches the supervisor only, which passes on one SIGTERM
        # (a worker that also got the SIGINT would count the SIGTERM as a second signal: no drain).
        # -P: the caller's working directory is not put on sys.path, so the sandbox (which grants sys.path)
        # never grants it either: ``cd ~ && fwx serve repo`` must not expose ~/.ssh to a worker.
        return subprocess.Popen(
            [sys.executable, "-P", "-m", "fwx.serving.workers"],
            stdin=subprocess.PIPE,
            env=self.env,
            process_group=0,
            pass_fds=(self.wake_w,),
        )

    def start_early(self, n: int) -> None:
        """Start ``n`` workers now; ``take`` hands them out once the supervisor is set up."""
        self._early += [self.start() for _ in range(n)]

    def take(self) -> subprocess.Popen[bytes]:
        """An early worker if one is left (and alive), else a fresh one."""
        while self._early:
            proc = self._early.pop(0)
            if proc.poll() is None:
                return proc
        return self.start()

    @staticmethod
    def hand(proc: subprocess.Popen[bytes], job: Job) -> None:
        """Give ``proc`` its job; a worker already dead is reaped by the supervisor's next tick."""
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):
            proc.stdin.write(pickle.dumps(job))
        with contextlib.suppress(BrokenPipeError, OSError):
            proc.stdin.close()

    def close(self) -> None:
        """Stop early workers never handed a job (they hold nothing yet) and close the pipe; idempotent."""
        for proc in self._early:
            proc.kill()
            proc.wait()
            if proc.stdin is not None:
                proc.stdin.close()
        self._early = []
        if not self._closed:
            self._closed = True
            os.close(self.wake_r)
            os.close(self.wake_w)


def read_job() -> Job | None:
    """The worker side: block for the job; None when the supervisor closed the pipe without one."""
    try:
        job = pickle.load(sys.stdin.buffer)  # written by our own supervisor, over a private pipe
    except EOFError:
        return None
    return job if isinstance(job, Job) else None
