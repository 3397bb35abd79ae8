"""gRPC and REST, full stack, side by side: server CPU per request.

One ``fwx serve`` process (gRPC on the event loop, fwx's one transport) over a
one-model repository, plus the optional rows below; every repeat measures each
row back to back in alternating order, so machine load hurts each alike. Server
CPU per request is read from the server's own counters over the measured window.

With ``--native`` (the default when benchmarks/peers/native_grpc builds), a
third row: the C++ front end of benchmarks/peers/native_grpc in ``forward``
mode terminating gRPC and forwarding each call's raw tensor bytes to the aio
server's REST port (binary tensor extension, keep-alive loopback connections);
its server CPU is the front end's plus fwx's. And a ``grpc-inproc`` row: the
in-process prototype (benchmarks/peers/native_grpc/inprocess_server.py,
libgrpc++ inside the Python process in front of fwx's data plane).

``--before DIR`` adds an aio server (gRPC and REST rows ``*-before``) run from
another checkout of fwx (``git archive BASE | tar -x -C DIR``): a same-run A/B
of a change.

Prints medians (with every run's CPU/request) and writes benchmarks/results/grpc_ab.json.

    .venv/bin/python benchmarks/grpc_ab.py --model small_cnn --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from grpc_floor import build_native, start_native  # noqa: E402
from serve import start_server  # noqa: E402
from serve_grpc_client import run_load  # noqa: E402
from serve_models import MODELS, publish  # noqa: E402
from serve_rest_client import run_load_rest  # noqa: E402


def _start_from(tree: Path, repo: Path) -> tuple[Any, str, str]:
    """``serve.start_server`` (aio) with the fwx package imported from another checkout ``tree``."""
    import serve

    here, serve.HERE = serve.HERE, tree.resolve() / "benchmarks"  # start_server's PYTHONPATH is HERE.parent
    try:
        return start_server(repo, [])
    finally:
        serve.HERE = here


def _start_inproc(repo: Path) -> tuple[Any, str] | None:
    """benchmarks/peers/native_grpc/inprocess_server.py on ``repo`` (None if its extension was not built)."""
    import subprocess

    native_dir = HERE / "peers" / "native_grpc"
    if not list((native_dir / "build").glob("_fwx_native_grpc*.so")):
        print("skipping grpc-inproc: the in-process extension was not built (see above)")
        return None
    port_file = Path(tempfile.mkdtemp(prefix="fwx-grpc-inproc-")) / "port"
    proc = subprocess.Popen(
        [sys.executable, str(native_dir / "inprocess_server.py"), str(repo), "--port-file", str(port_file)],
        env={**os.environ, "PYTHONPATH": str(HERE.parent)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    end = time.time() + 120
    while not port_file.exists():
        if proc.poll() is not None or time.time() > end:
            proc.kill()
            raise SystemExit("the in-process native gRPC prototype did not start")
        time.sleep(0.1)
    return proc, f"127.0.0.1:{port_file.read_text()}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="small_cnn", choices=sorted(MODELS))
    ap.add_argument("--concurrency", default="1,32")
    ap.add_argument("--duration", type=float, default=4.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--before", type=Path, default=None, help="another fwx checkout to A/B against (aio server)")
    ap.add_argument("--native", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "grpc_ab.json")
    args = ap.parse_args()
    build, shape = MODELS[args.model]
    work = Path(tempfile.mkdtemp(prefix="fwx-bench-grpc-ab-"))
    publish(work / "repo", args.model, build()[0], shape)
    x = {"x": np.random.default_rng(2).standard_normal((1, *shape)).astype(np.float32)}
    cs = [int(c) for c in args.concurrency.split(",")]
    kinds = ["aio"] + (["before"] if args.before else [])
    servers = {"aio": start_server(work / "repo", [])}
    if args.before:
        servers["before"] = _start_from(args.before, work / "repo")
    res: dict[str, list[dict[str, float]]] = {}
    native = build_native() if args.native else None
    front = None
    if native is not None:
        host_port = servers["aio"][1].removeprefix("http://")
        front = start_native(native, "forward", "--rest", host_port, "--connections", str(max(cs)))
    elif args.native:
        print("skipping grpc-native: benchmarks/peers/native_grpc could not be built (see above)")
    inproc = _start_inproc(work / "repo") if native is not None else None
    if inproc is not None:
        kinds.append("inproc")
        servers["inproc"] = (inproc[0], "", inproc[1])  # no REST port: no batch statistics either

    def batches(http_url: str | None) -> tuple[int, int]:
        if http_url is None:  # the in-process prototype has no REST port
            return 0, 0
        stats = httpx.get(f"{http_url}/v2/models/{args.model}/stats", timeout=10).json()["model_stats"][0]
        return int(stats["inference_count"]), int(stats["execution_count"])

    def measure(key: str, load: Any, url: str, pids: Any, http_url: str | None, c: int) -> None:
        before = batches(http_url)
        r = load(url, args.model, x, concurrency=c, duration_s=args.duration, server_pid=pids)
        after = batches(http_url)  # warm-up requests included: the mean batch size, not an exact count
        res.setdefault(key, []).append(
            {
                "req_per_s": r["req_per_s"],
                "cpu_us": r["server_cpu_us_per_req"],
                "p50_ms": r["latency_ms"]["p50"],
                "mean_batch": (after[0] - before[0]) / max(1, after[1] - before[1]) if http_url else float("nan"),
            }
        )

    try:
        for rep in range(args.repeats):
            for kind in kinds if rep % 2 == 0 else list(reversed(kinds)):
                proc, http_url, grpc_url = servers[kind]
                for c in cs:
                    measure(
                        f"grpc-{kind}/c{c}", run_load, grpc_url, proc.pid, None if kind == "inproc" else http_url, c
                    )
                    if kind == "aio" and front is not None:
                        measure(f"grpc-native/c{c}", run_load, front[1], (front[0].pid, proc.pid), http_url, c)
                    if kind in ("aio", "before"):
                        rest_key = f"rest/c{c}" if kind == "aio" else f"rest-before/c{c}"
                        measure(rest_key, run_load_rest, http_url, proc.pid, http_url, c)
            print(f"repeat {rep + 1} done", flush=True)
    finally:
        if front is not None:
            front[0].terminate()
            front[0].wait(30)
        for proc, _, _ in servers.values():
            proc.terminate()
            proc.wait(30)
    summary = {}
    for key, runs in sorted(res.items()):
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        summary[key] = {"median": med, "cpu_us_runs": [round(r["cpu_us"]) for r in runs]}
        print(
            f"{key:14s} {med['req_per_s']:7.0f} req/s  server CPU {med['cpu_us']:5.0f} us/req "
            f"(runs {summary[key]['cpu_us_runs']})  p50 {med['p50_ms']:.2f} ms  batch {med['mean_batch']:.1f}"
        )
    meta = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "cpus": os.cpu_count(),
        "model": args.model,
        "duration_s": args.duration,
        "repeats": args.repeats,
        "load_avg_at_end": os.getloadavg(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "summary": summary, "runs": res}, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
