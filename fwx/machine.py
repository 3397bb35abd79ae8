"""The machine this process runs on: the cores it may use, and files written whole.

Ground floor (docs/architecture.md): the exporter's prefetch process and
``fwx serve --workers auto`` size their pools by ``usable_cores``; the server's
run state, the prefetch answers, ``fwx dockerize`` and ``fwx deploy`` write by
``write_atomic`` so a reader never sees half a file; a crashed child (a server
worker, a loader probe, the prefetch process) is named by ``signal_name``.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask, e.g. a container's cpuset), not the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write ``data`` to a hidden file beside ``path``, then rename it over ``path``: readers see the old
    file or the whole new one, and a failed write leaves no temporary file behind."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        else:
            tmp.write_bytes(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def signal_name(signum: int) -> str:
    """``SIGSEGV`` for 11; ``signal 77`` for a number without a name (a child's returncode is ``-signum``)."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
