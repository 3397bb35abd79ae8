"""Memory and CPU-time limits for the process that loads an untrusted model.

A 176-byte ONNX graph can ask for gigabytes and a loop for hours; the scanners
cannot know how much a legitimate model needs, so the kernel bounds it instead.
Memory is ``RLIMIT_DATA`` (private writable memory: every heap and anonymous
mapping), not ``RLIMIT_AS``: the frameworks reserve large virtual ranges they
never touch (TensorFlow alone maps 2 GiB at import), which RLIMIT_AS would
count. CPU time is ``RLIMIT_CPU``: the soft limit sends SIGXCPU (the loader
prints one error line and ends), the hard limit a few seconds later SIGKILL
(for code stuck in C that never returns to Python).
"""

from __future__ import annotations

import math
import os
import re
import resource
import signal
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

from fwx.errors import FwxError

MEMORY_OPTION = "--memory-limit"
CPU_OPTION = "--cpu-time-limit"
#: Seconds between SIGXCPU and SIGKILL: time for Python to print the error line.
_GRACE_S = 5
_SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1 << 10, "m": 10**6, "mb": 10**6, "mib": 1 << 20}
_SIZE_UNITS |= {"g": 10**9, "gb": 10**9, "gib": 1 << 30, "t": 10**12, "tb": 10**12, "tib": 1 << 40}
_TIME_UNITS = {"": 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}  # as every other duration flag


class LimitError(FwxError):
    """The loader used up a limit; the message names it and the option that raises it."""

    exit_code = 1


@dataclass(frozen=True)
class Limits:
    """What one loader process may use; ``None`` is unlimited."""

    memory_bytes: int | None
    cpu_seconds: int | None

    def as_json(self) -> dict[str, object]:
        return {"memory": size_text(self.memory_bytes), "cpu_time": duration_text(self.cpu_seconds)}


def default_memory() -> int:
    """8 GiB, or half the machine where it has less than 16: a 24 GiB machine keeps room for the rest."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 16 << 30
    return min(8 << 30, total // 2 // (256 << 20) * (256 << 20))  # whole quarters of a GiB: a readable default


#: One hour of CPU (all threads together): the suite's largest export takes a few minutes.
DEFAULT_CPU_S = 3600
#: A scan or a probe (reading a model's structure, a trial load) needs far less.
PROBE = Limits(memory_bytes=2 << 30, cpu_seconds=120)


def defaults() -> Limits:
    return Limits(default_memory(), DEFAULT_CPU_S)


def parse_size(text: str) -> int | None:
    """``8GiB``, ``512MiB``, ``2G`` (decimal), ``none``; a bare number is bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if text.strip().lower() in ("none", "unlimited", "off"):
        return None
    if m is None or m.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"{text!r} is not a size: write e.g. 8GiB, 512MiB or none")
    value = int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])
    if value < 64 << 20:
        raise ValueError(f"{text!r} is too small to start Python: give at least 64MiB")
    return value


def parse_duration(text: str) -> int | None:
    """``30m``, ``90s``, ``2h``, ``none``; a bare number is seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if text.strip().lower() in ("none", "unlimited", "off"):
        return None
    if m is None or m.group(2).lower() not in _TIME_UNITS:
        raise ValueError(f"{text!r} is not a duration: write e.g. 30m, 90s, 2h or none")
    return max(1, math.ceil(float(m.group(1)) * _TIME_UNITS[m.group(2).lower()]))


def size_text(n: int | None) -> str:
    if n is None:
        return "none"
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if n >= size and n % (size // 16) == 0:
            return f"{n / size:g}{unit}"
    return f"{n}B"


def duration_text(s: int | None) -> str:
    if s is None:
        return "none"
    for unit, size in (("h", 3600), ("m", 60)):
        if s >= size and s % size == 0:
            return f"{s // size}{unit}"
    return f"{s}s"


def apply(limits: Limits) -> None:
    """Set the limits on this process (children inherit them); never raises them above the hard limit."""
    if limits.memory_bytes is not None:
        _lower(resource.RLIMIT_DATA, limits.memory_bytes, limits.memory_bytes)
    if limits.cpu_seconds is not None:
        _lower(resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + _GRACE_S)
        signal.signal(signal.SIGXCPU, _cpu_handler(limits.cpu_seconds))


def _lower(which: int, soft: int, hard: int) -> None:
    _, old_hard = resource.getrlimit(which)
    if old_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, old_hard), min(hard, old_hard)
    resource.setrlimit(which, (soft, hard))


def cpu_error(seconds: int | None) -> LimitError:
    return LimitError(
        f"the model's loader used up its CPU-time limit ({duration_text(seconds)} of CPU)",
        hint=f"raise it with {CPU_OPTION} (e.g. {CPU_OPTION} {duration_text((seconds or 60) * 4)}) if the model is trusted",
    )


def memory_error(limit: int | None) -> LimitError:
    return LimitError(
        f"the model's loader ran out of its memory limit ({size_text(limit)})",
        hint=f"raise it with {MEMORY_OPTION} (e.g. {MEMORY_OPTION} {size_text((limit or 1 << 30) * 2)}) if the "
        "model is trusted",
    )


def _cpu_handler(seconds: int) -> Callable[[int, FrameType | None], None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        # Print and end here: code that catches exceptions while measuring must not swallow the limit.
        from fwx import ui

        err = cpu_error(seconds)
        try:
            ui.fail(err.message, err.hint, err.exit_code)
        except SystemExit:
            pass
        finally:
            os._exit(err.exit_code)

    return handler


_ALLOCATION = re.compile(
    r"MemoryError|Unable to allocate|can't allocate memory|Cannot allocate memory|bad_alloc|out of memory|"
    r"failed to allocate|OOM when allocating",
    re.IGNORECASE,
)


def ran_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is an allocation the memory limit refused."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, MemoryError) or _ALLOCATION.search(f"{type(seen).__name__}: {seen}"):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def killed_by(status_signal: int, cpu_used_s: float, limits: Limits) -> LimitError | None:
    """The limit a loader that died of ``status_signal`` ran into, when it was one."""
    cpu = limits.cpu_seconds
    if status_signal in (signal.SIGXCPU, signal.SIGKILL) and cpu is not None and cpu_used_s >= cpu - 1:
        return cpu_error(cpu)
    return None
