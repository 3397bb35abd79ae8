"""Where and when a benchmark ran: the date, the commit, the machine, and the command.

Every results JSON under ``benchmarks/results/`` carries this block, so a figure in
docs/benchmarks.md can be traced to the code and the hardware that produced it.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import shlex
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str:
    try:
        res = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return res.stdout.strip() if res.returncode == 0 else ""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def provenance() -> dict[str, Any]:
    """The date (UTC), the commit (with a flag when the tree has uncommitted changes), the machine, the command."""
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    return {
        "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": _git("rev-parse", "HEAD") or "unknown",
        "tree_dirty": dirty,
        "machine": {
            "cpu": _cpu_model(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "load_avg_1m_at_end": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        },
        "command": "python " + shlex.join([os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]]),
    }


def spread(values: list[float], digits: int = 3) -> dict[str, float]:
    """Median with min and max: the form every figure in docs/benchmarks.md takes."""
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
        "runs": len(values),
    }


def shown(s: dict[str, float], digits: int = 3) -> str:
    """One ``spread`` as a table cell: ``median (min-max)``."""
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"


def timed_run(cmd: list[str]) -> float:
    """Seconds one command takes from start to exit, run from the project root; a failure ends the benchmark."""
    import time

    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)  # noqa: S603 - our own commands
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-400:]}")
    return took


def publish(result: dict[str, Any], table: str, out: Path) -> None:
    """Add the provenance block, print the table and write the results JSON."""
    import json

    result["provenance"] = provenance()
    print(table)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
