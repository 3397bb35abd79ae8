"""Benchmark: the conversion matrix, every source kind x target x architecture, validated.

Builds each architecture (ResNet-style CNN, depthwise-separable CNN, MLP, a
two-input/two-output model; Transformer encoder and LSTM for PyTorch and ONNX)
as a PyTorch, Keras, SavedModel and ONNX source, runs ``fwx.exporter.export``
with ``--to all`` (fp32 validation policy, each dynamic dim at two sizes), and
records per cell: pass/fail, max abs error, dynamic dims kept, seconds, path.

Prints a table and writes bench-results/matrix.json and bench-results/matrix.md.
    python benchmarks/matrix.py [--kinds pytorch,onnx] [--archs resnet,lstm] [--out bench-results]

``--zoo`` runs the test zoo instead (tests/zoo: Hugging Face BERT/GPT-2/ViT/T5
encoder/DeBERTa-v2, torchvision ResNet-18/MobileNetV3/EfficientNet-B0, keras.applications
MobileNetV2/EfficientNetB0, a Keras BiLSTM, recommender and Transformer block,
each saved as its users save it): per row the whole
``--to all`` export's wall time, its slowest single hop and their ratio (goal:
no row slower than 2x its slowest hop), plus each cell's verdict. Writes
bench-results/zoo.json and zoo.md.
    python benchmarks/matrix.py --zoo [bert:onnx,keras_bilstm:savedmodel | all]
``FWX_PREFETCH=off|on|auto`` sets the exports' hop prefetch (default auto; docs/export.md) for an A/B.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fwx import ui  # noqa: E402
from fwx.formats import TARGETS  # noqa: E402
from tests.converters import matrix_models as mm  # noqa: E402
from tests.converters.matrix_run import KINDS, Cell, build_source, run_row  # noqa: E402

#: Sequence models come from PyTorch and ONNX only (issue 5).
SEQUENCE_KINDS = ("pytorch", "onnx")


def rows(kinds: list[str], archs: list[str]) -> list[tuple[str, str]]:
    out = []
    for arch in archs:
        for kind in kinds:
            if arch in mm.SEQUENCE and kind not in SEQUENCE_KINDS:
                continue
            out.append((kind, arch))
    return out


def run(kinds: list[str], archs: list[str], work: Path) -> list[dict[str, Any]]:
    results = []
    for kind, arch in rows(kinds, archs):
        t0 = time.perf_counter()
        src = build_source(kind, arch, work / "src" / kind)
        cells, _ = run_row(src, work / "repo")
        wall = time.perf_counter() - t0
        ok = sum(c.passed for c in cells)
        print(f"{kind:>10} {arch:<11} {ok}/{len(cells)} cells pass  ({wall:.1f}s)", flush=True)
        for c in cells:
            if not c.passed:
                print(f"{'':>12} {c.target}: {c.error}", flush=True)
        results.append({"kind": kind, "arch": arch, "wall_s": round(wall, 2), "cells": [c.to_json() for c in cells]})
    return results


def _mark(cell: dict[str, Any]) -> str:
    """pass (worst max abs error) | FAIL (an artifact with wrong numbers or a pinned dim) | error (no artifact)."""
    if cell["status"] == "error":
        return "error"
    if not Cell(**cell).passed:
        return "FAIL"
    err = cell["max_abs"]
    return "pass" + (f" ({err:.0e})" if err is not None else "")


def markdown(results: list[dict[str, Any]]) -> str:
    """One row per (source, architecture); one column per target: verdict and max abs error."""
    head = ["source", "architecture", *[t.value for t in TARGETS], "dynamic dims kept", "seconds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = {c["target"]: c for c in r["cells"]}
        dyn = all(c["dynamic_kept"] for c in r["cells"] if c["status"] != "error")
        marks = [_mark(cells[t.value]) if t.value in cells else "-" for t in TARGETS]
        lines.append(
            f"| {r['kind']} | {r['arch']} | " + " | ".join(marks) + f" | {'yes' if dyn else 'NO'} | {r['wall_s']:.1f} |"
        )
    total = sum(len(r["cells"]) for r in results)
    ok = sum(Cell(**c).passed for r in results for c in r["cells"])
    lines += [
        "",
        f"{ok}/{total} cells pass. Each cell: exported with `fwx export --to all`, read back, and validated "
        "against the source model (fp32 policy: atol 1e-4, rtol 1e-3) on 4 samples that exercise every dynamic "
        "dim at two sizes; the number is the worst max abs error over all outputs. Seconds: the whole row "
        "(loading, every conversion, read-back and validation).",
    ]
    return "\n".join(lines) + "\n"


def zoo(which: str, out: Path) -> int:
    """Run zoo rows (``all`` or ``model:kind,...``); print and write the timing table."""
    from tests.zoo import models
    from tests.zoo.run import run_zoo_row

    wanted = models.ROWS if which == "all" else [tuple(x.split(":", 1)) for x in which.split(",") if x]
    rows = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fwx-zoo-") as tmp:
        for name, kind in wanted:
            r = run_zoo_row(name, kind, Path(tmp) / f"{name}_{kind}")
            ok = sum(c.passed for c in r.cells.values())
            print(
                f"{name:>22} {kind:<12} {ok}/5 pass  export {r.export_s:6.1f}s  Σ hops {sum(r.hops.values()):5.1f}s  "
                f"slowest hop {r.slowest_hop[1]:5.1f}s ({r.slowest_hop[0]})",
                flush=True,
            )
            rows.append(r.to_json())
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "total_s": round(time.perf_counter() - t0, 1),
        "versions": _versions(),
    }
    (out / "zoo.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n", encoding="utf-8")
    table = zoo_markdown(rows)
    (out / "zoo.md").write_text(table, encoding="utf-8")
    print("\n" + table)
    return 0 if all(Cell(**c).passed for r in rows for c in r["cells"]) else 1


def zoo_markdown(rows: list[dict[str, Any]]) -> str:
    """The README's zoo table: verdicts, then export s, Σ hops s (the published paths' hops, each once),
    the slowest hop and export ÷ slowest hop (goal: at most 2); the last line counts the rows that meet it."""
    head = ["model", "source", *[t.value for t in TARGETS], "export s", "Σ hops s", "slowest hop s", "export ÷ slowest"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = {c["target"]: c for c in r["cells"]}
        marks = [_mark(cells[t.value]) if t.value in cells else "-" for t in TARGETS]
        hop, secs = r["slowest_hop"]
        lines.append(
            f"| {r['model']} | {r['kind']} | "
            + " | ".join(marks)
            + f" | {r['export_s']:.1f} | {sum(r['hops'].values()):.1f} | {secs:.1f} ({hop}) | {r['ratio'] or '-'} |"
        )
    met = sum(1 for r in rows if r["ratio"] is not None and r["ratio"] <= 2.0)
    return "\n".join(lines) + f"\n\n{met} of {len(rows)} rows within 2x their slowest hop.\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--archs", default=",".join((*mm.CORE, *mm.SEQUENCE)))
    p.add_argument("--out", default=str(ROOT / "bench-results"))
    p.add_argument("--zoo", nargs="?", const="all", default=None, help="run the test zoo: all, or model:kind,...")
    args = p.parse_args(argv)
    ui.state.quiet = True
    if args.zoo:
        return zoo(args.zoo, Path(args.out))
    kinds, archs = args.kinds.split(","), args.archs.split(",")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fwx-matrix-") as tmp:
        results = run(kinds, archs, Path(tmp))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "total_s": round(time.perf_counter() - t0, 1),
        "versions": _versions(),
    }
    (out / "matrix.json").write_text(json.dumps({"meta": meta, "rows": results}, indent=2) + "\n", encoding="utf-8")
    table = markdown(results)
    (out / "matrix.md").write_text(table, encoding="utf-8")
    print("\n" + table)
    print(f"wrote {out / 'matrix.json'} and {out / 'matrix.md'} ({meta['total_s']}s)")
    return 0 if all(Cell(**c).passed for r in results for c in r["cells"]) else 1


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in (
        "torch",
        "tensorflow",
        "keras",
        "onnx",
        "onnxruntime",
        "tf2onnx",
        "ai-edge-litert",
        "transformers",
        "torchvision",
    ):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "not installed"
    return out


if __name__ == "__main__":
    sys.exit(main())
