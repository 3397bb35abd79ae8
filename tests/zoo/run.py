"""Run one zoo row (a model saved as one source kind) through ``fwx export --to all`` and read its cells.

Shared by ``tests/zoo/test_zoo.py`` and ``benchmarks/matrix.py --zoo`` so the
tests and the published table measure the same thing. The cells are the
conversion matrix's (``tests/converters/matrix_run.py``): status, validated,
worst max abs error, dynamic dims kept, hops, sample shapes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import models

try:  # under pytest, tests/ is on sys.path (rootdir-relative packages)
    from converters.matrix_run import Cell, Source, run_row
except ImportError:  # benchmarks/matrix.py puts the repository root there instead
    from tests.converters.matrix_run import Cell, Source, run_row


@dataclass
class ZooRow:
    name: str
    kind: str
    path: Path
    cells: dict[str, Cell]
    results: dict[str, Any]  # target -> ExportResult holding it
    build_s: float
    export_s: float  # the whole `--to all` export (plus per-target retries when it raised)
    slowest_hop: tuple[str, float] = ("", 0.0)
    hops: dict[str, float] = field(default_factory=dict)  # "src->dst (tool)" -> seconds, each hop once

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.name,
            "kind": self.kind,
            "build_s": round(self.build_s, 2),
            "export_s": round(self.export_s, 2),
            "slowest_hop": list(self.slowest_hop),
            "ratio": round(self.export_s / self.slowest_hop[1], 2) if self.slowest_hop[1] else None,
            "hops": self.hops,
            "cells": [c.to_json() for c in self.cells.values()],
        }


def run_zoo_row(name: str, kind: str, root: Path, **options: Any) -> ZooRow:
    """Save ``name`` as ``kind`` under ``root/src`` and export it to every target into ``root/repo``."""
    t0 = time.perf_counter()
    path, kwargs = models.save(name, kind, root / "src" / kind)
    build = time.perf_counter() - t0
    t1 = time.perf_counter()
    cells, results = run_row(Source(kind, name, str(path), kwargs), root / "repo", **options)
    wall = time.perf_counter() - t1
    hops: dict[str, float] = {}
    for target, result in results.items():
        entry = result.manifest.artifacts.get(target) if result.manifest else None
        for h in entry.hops if entry else []:
            key = f"{h['source']}->{h['target']} ({h['tool']})"
            hops[key] = max(hops.get(key, 0.0), round(float(h.get("seconds", 0.0)), 2))
    slowest = max(hops.items(), key=lambda kv: kv[1], default=("", 0.0))
    return ZooRow(name, kind, path, {c.target: c for c in cells}, results, build, wall, slowest, hops)
