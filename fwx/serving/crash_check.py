"""The supervisor's own verdict on an artifact a worker says killed it.

A worker that dies while its loading mark names an artifact may have died of
that artifact, or may be lying: code inside a worker can write any artifact's
key and kill itself, and a quarantine on its word would take a healthy model
out of service. So the supervisor loads that artifact once more in a trial
child it starts itself (``python -P -m fwx.serving.loader_probe``: its own
walls, namespaces, no socket and Landlock reading only the repository; the
probe's memory, CPU and time limits; the version's signature and warm-up from
its ``fwx.json``), trusted artifacts too, and
quarantines the artifact, for every worker, only when the trial crashes or
hangs too. A trial that loads cleanly, or refuses the file with a message,
quarantines nothing: the restarted worker loads it or refuses it itself.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fwx.formats import Format
from fwx.machine import signal_name
from fwx.serving.loader_probe import DEFAULT_CPU_S, DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S


@dataclass
class CrashCheck:
    """One trial of one artifact, started by the supervisor; ``verdict`` polls it."""

    key: str
    what: str  # "lin v2 model.onnx (onnx)"
    proc: subprocess.Popen[bytes]
    deadline: float
    timeout_s: float

    def verdict(self, now: float) -> str | None:
        """The quarantine reason (the trial crashed or hung too), "" (it did not), None (still running)."""
        code = self.proc.poll()
        if code is None and now < self.deadline:
            return None
        if code is None:
            self.stop()
            return f"loader timed out after {self.timeout_s:g}s on {self.what}"
        if code < 0:
            return f"loader crashed ({signal_name(-code)}) on {self.what}"
        if code == 137:  # the kernel's OOM killer, as a shell reports it
            return f"loader ran out of memory on {self.what}"
        return ""  # 0: loads cleanly; REFUSED or another exit: the worker will say why itself

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            self.proc.wait(10)


def artifact_of(key: str) -> tuple[Format, Path]:
    """Format and repository path of a key that ``runstate.describe_key`` accepted."""
    fmt, _, rest = key.partition(":")
    path = rest.rsplit(":", 2)[0] if rest.count(":") >= 2 else rest
    return Format(fmt), Path(path)


def start(
    key: str,
    what: str,
    *,
    repository: Path,
    env: dict[str, str],
    trust_model_code: bool,
    require_sandbox: bool,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    sandbox: bool = True,
) -> CrashCheck:
    """Start the trial of the artifact ``key`` names (``what`` describes it in the reason).

    A trusted model is tried too, inside the sandbox like any other: ``sandbox=False`` only with
    ``--no-sandbox``, where the workers themselves run with no wall."""
    fmt, path = artifact_of(key)
    cmd = [sys.executable, "-P", "-m", "fwx.serving.loader_probe", fmt.value, str(path), "--manifest"]
    cmd += ["--cpu-s", str(DEFAULT_CPU_S), "--memory-mb", str(DEFAULT_MEMORY_MB)]
    if trust_model_code:
        cmd.append("--trust-model-code")
    if sandbox:
        cmd += ["--sandbox-read", str(Path(repository).resolve())]
        if require_sandbox:
            cmd.append("--require-sandbox")
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**env, "CUDA_VISIBLE_DEVICES": ""},
        process_group=0,
    )
    return CrashCheck(key, what, proc, time.monotonic() + timeout_s, timeout_s)
