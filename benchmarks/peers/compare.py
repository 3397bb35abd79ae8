"""fwx vs MLServer over gRPC, run back to back N times: medians with their spread.

One run of each server is noisy on a small machine, so this alternates
``benchmarks/serve.py`` and ``benchmarks/peers/run_mlserver.py`` (same models,
same closed-loop gRPC client, same concurrency) ``--repeats`` times and reports
the median req/s, p99 and server CPU per request of each, min-max in brackets.
Needs ``setup_mlserver.sh`` first. Writes bench-results/compare_mlserver.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))


def _run(script: Path, out: Path, args: argparse.Namespace, extra: list[str]) -> list[dict[str, Any]]:
    cmd = [sys.executable, str(script), "--models", args.models, "--concurrency", str(args.concurrency)]
    cmd += ["--duration", str(args.duration), "--out", str(out), *extra]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return [r for r in json.loads(out.read_text())["rows"] if r.get("protocol", "grpc") == "grpc"]


def _spread(values: list[float], fmt: str) -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="small_cnn,resnet_like")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "compare_mlserver.json")
    args = ap.parse_args()
    from fwx import ui

    runs: dict[str, dict[str, list[dict[str, Any]]]] = {"fwx": {}, "mlserver": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            order = [
                ("fwx", ROOT / "benchmarks" / "serve.py", ["--protocols", "grpc"]),
                ("mlserver", HERE / "run_mlserver.py", []),
            ]
            for server, script, extra in order if rep % 2 == 0 else order[::-1]:
                for r in _run(script, Path(tmp) / f"{server}{rep}.json", args, extra):
                    runs[server].setdefault(r["model"], []).append(r)
            print(f"repeat {rep + 1}/{args.repeats} done", flush=True)
    table, summary = [], {}
    for model in args.models.split(","):
        for server in ("fwx", "mlserver"):
            rs = runs[server][model]
            rps = [r["req_per_s"] for r in rs]
            p99 = [r["latency_ms"]["p99"] for r in rs]
            cpu = [r.get("server_cpu_us_per_req") or 0.0 for r in rs]
            summary[f"{server}/{model}"] = {"req_per_s": rps, "p99_ms": p99, "cpu_us_per_req": cpu}
            table.append([model, server, _spread(rps, ".0f"), _spread(p99, ".1f"), _spread(cpu, ".0f")])
        ratio = statistics.median(summary[f"fwx/{model}"]["req_per_s"]) / statistics.median(
            summary[f"mlserver/{model}"]["req_per_s"]
        )
        summary[f"ratio/{model}"] = {"fwx_over_mlserver_median_req_per_s": round(ratio, 2)}
        table.append([model, "fwx ÷ MLServer", f"{ratio:.2f}x", "", ""])
    print(ui.table(["model", "server", f"req/s c={args.concurrency}", "p99 ms", "server CPU us/req"], table))
    meta = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "repeats": args.repeats,
        "concurrency": args.concurrency,
        "duration_s": args.duration,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "summary": summary}, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
