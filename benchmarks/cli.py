"""Benchmark: how fast the CLI starts, and how long exporting the sample CNN takes per format.

* ``fwx --help``: wall time of a fresh process (median of ``--repeats`` runs). Goal <= 0.25 s
  with torch and TensorFlow installed (the CLI imports neither to print help).
* ``fwx export`` of ``samples.models:SmallCNN`` to each format in a fresh process, with
  validation: total wall time, plus the conversion time fwx recorded per hop in fwx.json.

Each export runs ``--export-repeats`` times (fresh processes, a fresh repository each time);
the table shows the median with min-max. Prints a table and writes bench-results/cli.json
(date, commit and machine included: benchmarks/_provenance.py).
    python benchmarks/cli.py [--repeats 7] [--export-repeats 3] [--formats torchscript,pt2,onnx,savedmodel,tflite]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._provenance import provenance, spread  # noqa: E402

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
            "max_s": round(max(walls), 3),
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


def summarise(fmt: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row per format: the median (min-max) of the runs that exported; every run kept under ``runs``."""
    ok = [r for r in runs if r["ok"]]
    row: dict[str, Any] = {"format": fmt, "ok": len(ok) == len(runs), "runs": runs}
    if ok:
        row.update(
            wall_s=spread([r["wall_s"] for r in ok], 2),
            cpu_s=spread([r["cpu_s"] for r in ok], 2),
            convert_s=spread([r["convert_s"] for r in ok]),
            path=ok[-1]["path"],
            size_bytes=ok[-1]["size_bytes"],
            validated=all(r["validated"] for r in ok),
            max_abs=max(r["max_abs"] for r in ok),
        )
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--export-repeats", type=int, default=3)
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
            runs = [bench_export(fmt, source, Path(tmp) / f"repo{i}") for i in range(args.export_repeats)]
            rows.append(summarise(fmt, runs))
    result = {
        "provenance": provenance(),
        "help": help_row,
        "export": rows,
    }
    h, base = help_row["help"], help_row["python_baseline"]
    print(
        f"fwx --help: median {h['median_s']:.3f} s wall, {h['median_cpu_s']:.3f} s CPU over {help_row['runs']} runs "
        f"(goal <= {HELP_GOAL_S} s: {'met' if help_row['meets_goal'] else 'MISSED'}); "
        f"bare `python -c pass`: {base['median_s']:.3f} s"
    )
    print(
        f"{'format':<12} {'wall s, median (min-max)':>26} {'cpu s':>6} {'convert s':>9} {'size':>9}  {'check':<6} path"
    )
    for r in rows:
        if "wall_s" not in r:
            print(f"{r['format']:<12} ERROR {r['runs'][-1].get('error', '')}")
            continue
        w = r["wall_s"]
        check = "PASS" if r["validated"] and r["ok"] else "FAIL"
        print(
            f"{r['format']:<12} {w['median']:>11.2f} ({w['min']:.2f}-{w['max']:.2f}) {r['cpu_s']['median']:>6.2f} "
            f"{r['convert_s']['median']:>9.3f} {r['size_bytes']:>9}  {check:<6} {r['path']}"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
