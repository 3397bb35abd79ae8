"""`fwx serve --workers N`: throughput and server CPU per request for N = 1, 2, ... side by side.

One ``fwx serve --workers N`` per N runs at the same time (idle servers cost
nothing); each repeat measures every N back to back, in alternating order, so
a busy shared machine hurts every N alike. Server CPU is the supervisor plus
all its workers (psutil, over exactly the measured window) divided by the
requests answered: it does not depend on how many other processes compete for
the cores, which is why it is the figure to compare on a shared machine.

The REST client opens ``c`` connections and the gRPC client ``min(c, 8)``
channels: SO_REUSEPORT spreads connections, not requests, over the workers.

Prints a table (median of the repeats, with min-max) and writes
bench-results/serve_workers.json.

    .venv/bin/python benchmarks/serve_workers.py                      # ResNet-style, N = 1,2, 3 repeats
    .venv/bin/python benchmarks/serve_workers.py --workers 1,2,4,8 --duration 10
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from serve import start_server  # noqa: E402
from serve_grpc_client import run_load  # noqa: E402
from serve_models import MODELS, publish  # noqa: E402
from serve_rest_client import run_load_rest  # noqa: E402

KEYS = ("req_per_s", "server_cpu_us_per_req", "p50_ms", "p99_ms")


def _measure(
    proto: str, urls: tuple[str, str], pid: int, model: str, inputs: dict[str, np.ndarray], c: int, seconds: float
) -> dict[str, Any]:
    http_url, grpc_url = urls
    if proto == "grpc":
        r = run_load(
            grpc_url, model, inputs, concurrency=c, duration_s=seconds, server_pid=pid, channels_per_proc=min(c, 8)
        )
    else:
        r = run_load_rest(http_url, model, inputs, concurrency=c, duration_s=seconds, server_pid=pid)
    return {
        "req_per_s": r["req_per_s"],
        "server_cpu_us_per_req": r.get("server_cpu_us_per_req"),
        "p50_ms": r["latency_ms"]["p50"],
        "p99_ms": r["latency_ms"]["p99"],
        "errors": r["errors"],
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and spread (min, max) of each figure over the repeats."""
    out: dict[str, Any] = {"runs": len(runs)}
    for key in KEYS:
        vals = [float(r[key]) for r in runs if r.get(key) is not None]
        if vals:
            out[key] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet_like", choices=sorted(MODELS))
    ap.add_argument("--workers", default="1,2", help="comma-separated N values")
    ap.add_argument("--protocols", default="rest,grpc")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--serve-arg", action="append", default=[], help="extra fwx serve flag (repeatable)")
    ap.add_argument("--out", type=Path, default=HERE.parent / "bench-results" / "serve_workers.json")
    args = ap.parse_args()
    from fwx import ui

    build, shape = MODELS[args.model]
    onnx_bytes, flops = build()
    work = Path(tempfile.mkdtemp(prefix="fwx-bench-workers-"))
    publish(work / "repo", args.model, onnx_bytes, shape)
    inputs = {"x": np.random.default_rng(2).standard_normal((1, *shape)).astype(np.float32)}
    ns = [int(v) for v in args.workers.split(",")]
    servers = {n: start_server(work / "repo", ["--workers", str(n), *args.serve_arg]) for n in ns}
    raw: dict[str, list[dict[str, Any]]] = {}
    try:
        for rep in range(args.repeats):
            for n in ns if rep % 2 == 0 else list(reversed(ns)):
                proc, http_url, grpc_url = servers[n]
                for proto in args.protocols.split(","):
                    r = _measure(
                        proto, (http_url, grpc_url), proc.pid, args.model, inputs, args.concurrency, args.duration
                    )
                    raw.setdefault(f"{n}/{proto}", []).append(r)
                    print(
                        f"run {rep + 1}: workers {n} {proto} c={args.concurrency}: {r['req_per_s']:.0f} req/s, "
                        f"server CPU {r['server_cpu_us_per_req'] or 0:.0f} us/req, p99 {r['p99_ms']:.1f} ms",
                        flush=True,
                    )
    finally:
        for proc, _, _ in servers.values():
            proc.terminate()
            proc.wait(60)
    summary = {key: summarize(runs) for key, runs in raw.items()}
    table = []
    for key, s in summary.items():
        n, proto = key.split("/")

        def cell(k: str, fmt: str, s: dict[str, Any] = s) -> str:
            v = s.get(k)
            return "-" if v is None else f"{v['median']:{fmt}} ({v['min']:{fmt}}-{v['max']:{fmt}})"

        table.append(
            [
                n,
                proto,
                str(args.concurrency),
                cell("req_per_s", ".0f"),
                cell("server_cpu_us_per_req", ".0f"),
                cell("p50_ms", ".1f"),
                cell("p99_ms", ".1f"),
            ]
        )
    print()
    print(ui.table(["workers", "proto", "c", "req/s", "server CPU us/req", "p50 ms", "p99 ms"], table))
    meta = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "model": args.model,
        "mflop_per_sample": flops / 1e6,
        "concurrency": args.concurrency,
        "duration_s": args.duration,
        "repeats": args.repeats,
        "serve_args": args.serve_arg,
        "load_avg_at_end": os.getloadavg(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "summary": summary, "runs": raw}, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
