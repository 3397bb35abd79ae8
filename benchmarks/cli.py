"""Benchmark: how fast the CLI starts, and how long exporting the sample CNN takes per format.

* ``fwx --help``: wall time of a fresh process (median of ``--repeats`` runs). Goal <= 0.25 s
  with torch and TensorFlow installed (the CLI imports neither to print help).
* ``fwx export`` of ``samples.models:SmallCNN`` to each format in a fresh process, with
  validation: total wall time, plus the conversion time fwx recorded per hop in fwx.json.

Prints a table and writes bench-results/cli.json.
    python benchmarks/cli.py [--repeats 7] [--formats torchscript,pt2,onnx,savedmodel,tflite]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HELP_GOAL_S = 0.25
FORMATS = ("torchscript", "pt2", "onnx", "savedmodel", "tflite")


def timed(cmd: list[str], cwd: Path) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """(wall seconds, child CPU seconds, result): CPU time is what a busy machine does not inflate."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc


def bench_help(repeats: int) -> dict[str, Any]:
    runs = {"fwx --help": [sys.executable, "-m", "fwx", "--help"], "python -c pass": [sys.executable, "-c", "pass"]}
    out: dict[str, Any] = {"runs": repeats, "goal_s": HELP_GOAL_S}
    for label, cmd in runs.items():
        walls, cpus = [], []
        for _ in range(repeats):
            wall, cpu, proc = timed(cmd, ROOT)
            if proc.returncode != 0:
                raise SystemExit(f"{label} failed: {proc.stderr.strip()}")
            walls.append(wall)
            cpus.append(cpu)
        key = "help" if label.startswith("fwx") else "python_baseline"
        out[key] = {
            "median_s": round(statistics.median(walls), 3),
            "min_s": round(min(walls), 3),
            "median_cpu_s": round(statistics.median(cpus), 3),
        }
    out["meets_goal"] = out["help"]["median_s"] <= HELP_GOAL_S
    return out


def bench_export(fmt: str, source: Path, out: Path) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from samples import CNN_EXPORT_ARGS

    cmd = [
        sys.executable,
        "-m",
        "fwx",
        "export",
        str(source),
        *CNN_EXPORT_ARGS,
        "--to",
        fmt,
        "--out",
        str(out),
        "--name",
        fmt,
        "--json",
    ]
    seconds, cpu, proc = timed(cmd, ROOT)
    row: dict[str, Any] = {
        "format": fmt,
        "wall_s": round(seconds, 2),
        "cpu_s": round(cpu, 2),
        "ok": proc.returncode == 0,
    }
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        row["error"] = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        return row
    if not row["ok"]:
        row["error"] = doc.get("error")
        return row
    entry = doc["manifest"]["artifacts"][fmt]
    row.update(
        {
            "convert_s": round(sum(h["seconds"] for h in entry["hops"]), 3),
            "path": " -> ".join([entry["hops"][0]["source"], *(h["target"] for h in entry["hops"])]),
            "size_bytes": entry["size_bytes"],
            "validated": entry["validation"].get("passed"),
            "max_abs": max((o.get("max_abs") or 0) for o in entry["validation"]["outputs"].values()),
        }
    )
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "cli.json"))
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    import torch

    from samples.models import build_torch_cnn

    help_row = bench_help(args.repeats)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "cnn.pt"
        torch.save(build_torch_cnn().state_dict(), source)
        for fmt in [f.strip() for f in args.formats.split(",") if f.strip()]:
            rows.append(bench_export(fmt, source, Path(tmp) / "repo"))
    result = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        },
        "help": help_row,
        "export": rows,
    }
    h, base = help_row["help"], help_row["python_baseline"]
    print(
        f"fwx --help: median {h['median_s']:.3f} s wall, {h['median_cpu_s']:.3f} s CPU over {help_row['runs']} runs "
        f"(goal <= {HELP_GOAL_S} s: {'met' if help_row['meets_goal'] else 'MISSED'}); "
        f"bare `python -c pass`: {base['median_s']:.3f} s"
    )
    print(f"{'format':<12} {'wall s':>7} {'cpu s':>6} {'convert s':>9} {'size':>9}  {'check':<6} path")
    for r in rows:
        check = "PASS" if r.get("validated") else ("FAIL" if r["ok"] else "ERROR")
        print(
            f"{r['format']:<12} {r['wall_s']:>7.2f} {r['cpu_s']:>6.2f} {r.get('convert_s', float('nan')):>9.3f} "
            f"{r.get('size_bytes', 0):>9}  {check:<6} {r.get('path', r.get('error', ''))}"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
