"""`fwx serve` throughput, latency and server CPU per request, against in-process onnxruntime.

For a small CNN (3x32x32) and a compute-bound ResNet-style CNN (3x64x64, ~210
MFLOP), one sample per request, at concurrency 1, 8 and 32, over gRPC and REST
(binary tensors): req/s, p50/p95/p99, and server CPU per request read from the
server process's own counters (psutil, before/after each window). The load
client runs in this process; the server is a ``fwx serve`` subprocess.

Baselines, measured in-process with the same runtime (fwx.runtimes ONNX):
batch-1 latency (the c=1 goal: p50 <= in-process + 1 ms) and CPU time per
sample at batch 32 (the compute-bound goal: server CPU/request <= 1.25x).

Prints a table and writes bench-results/serve.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from serve_grpc_client import run_load  # noqa: E402
from serve_models import MODELS, publish  # noqa: E402
from serve_rest_client import run_load_rest  # noqa: E402


def in_process(path: Path, shape: tuple[int, ...], seconds: float = 2.0) -> dict[str, float]:
    """Batch-1 latency and batch-32 CPU per sample of the artifact, on fwx's own ONNX runtime."""
    from fwx.formats import Format
    from fwx.runtimes import load_runtime

    rt = load_runtime(Format.ONNX, path)
    x1 = np.random.default_rng(0).standard_normal((1, *shape)).astype(np.float32)
    x32 = np.random.default_rng(1).standard_normal((32, *shape)).astype(np.float32)
    for _ in range(20):
        rt.infer({"x": x1})
    lat: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        rt.infer({"x": x1})
        lat.append(time.perf_counter() - t0)
    rt.infer({"x": x32})
    runs, cpu0, wall0 = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - wall0 < seconds or runs < 3:
        rt.infer({"x": x32})
        runs += 1
    cpu = (time.process_time() - cpu0) / (runs * 32)
    wall = (time.perf_counter() - wall0) / (runs * 32)
    rt.close()
    return {
        "b1_p50_ms": float(np.percentile(lat, 50) * 1e3),
        "b1_cpu_us": 0.0,
        "b32_cpu_us_per_sample": cpu * 1e6,
        "b32_wall_us_per_sample": wall * 1e6,
    }


def paired_c1(
    path: Path, name: str, shape: tuple[int, ...], http_url: str, grpc_url: str, seconds: float = 4.0
) -> dict[str, float]:
    """c=1 latency with in-process, gRPC and REST calls interleaved, so all three see the same CPU contention.

    The in-process session does not spin its threads between calls (they would
    compete with the server for the cores), which barely changes its latency.
    """
    import http.client

    import grpc
    import onnxruntime as ort
    from serve_grpc_client import build_request
    from serve_rest_client import build_request as build_rest

    x = np.random.default_rng(3).standard_normal((1, *shape)).astype(np.float32)
    # No spinning here: idle-spinning client threads would steal the 2 cores from the server under test.
    options = ort.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    channel = grpc.insecure_channel(grpc_url)
    call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
    payload = build_request(name, {"x": x})
    host, port = http_url.removeprefix("http://").rsplit(":", 1)
    rest_raw = build_rest(host, int(port), name, {"x": x})
    head, body = rest_raw.split(b"\r\n\r\n", 1)
    headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:])
    conn = http.client.HTTPConnection(host, int(port))
    times: dict[str, list[float]] = {"in_process": [], "grpc": [], "rest": []}
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        session.run(None, {"x": x})
        t1 = time.perf_counter()
        call(payload, timeout=30)
        t2 = time.perf_counter()
        conn.request("POST", f"/v2/models/{name}/infer", body=body, headers=headers)
        conn.getresponse().read()
        t3 = time.perf_counter()
        for key, dt in (("in_process", t1 - t0), ("grpc", t2 - t1), ("rest", t3 - t2)):
            times[key].append(dt * 1e3)
    channel.close()
    conn.close()
    return {f"{k}_p50_ms": float(np.percentile(v, 50)) for k, v in times.items()} | {"pairs": len(times["rest"])}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(repo: Path, extra: list[str]) -> tuple[subprocess.Popen[bytes], str, str]:
    import httpx

    http, grpc_port = _free_port(), _free_port()
    cmd = [
        sys.executable,
        "-m",
        "fwx",
        "serve",
        str(repo),
        "--http-port",
        str(http),
        "--grpc-port",
        str(grpc_port),
        "--poll-seconds",
        "0",
        "--log-level",
        "warning",
        *extra,
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(HERE.parent)}
    )
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"fwx serve exited with {proc.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{http}/v2/health/ready", timeout=1).status_code == 200:
                return proc, f"http://127.0.0.1:{http}", f"127.0.0.1:{grpc_port}"
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("fwx serve did not become ready")


def _row(model: str, proto: str, r: dict[str, Any], base: dict[str, float]) -> list[str]:
    lat = r["latency_ms"]
    cpu = r.get("server_cpu_us_per_req")
    ratio = cpu / base["b32_cpu_us_per_sample"] if cpu else float("nan")
    errs = sum(r["errors"].values()) if r["errors"] else 0
    return [
        model,
        proto,
        str(r["concurrency"]),
        f"{r['req_per_s']:.0f}",
        f"{lat['p50']:.2f}",
        f"{lat['p95']:.2f}",
        f"{lat['p99']:.2f}",
        f"{cpu:.0f}" if cpu else "-",
        f"{ratio:.2f}",
        str(errs),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--protocols", default="grpc,rest")
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--serve-arg", action="append", default=[], help="extra fwx serve flag (repeatable)")
    ap.add_argument("--out", type=Path, default=HERE.parent / "bench-results" / "serve.json")
    args = ap.parse_args()
    from fwx import ui

    work = Path(tempfile.mkdtemp(prefix="fwx-bench-serve-"))
    names = args.models.split(",")
    baselines: dict[str, dict[str, float]] = {}
    for name in names:
        build, shape = MODELS[name]
        onnx_bytes, flops = build()
        version = publish(work / "repo", name, onnx_bytes, shape)
        baselines[name] = {**in_process(version / "model.onnx", shape), "mflop_per_sample": flops / 1e6}
        print(
            f"{name}: {flops / 1e6:.0f} MFLOP/sample, in-process b1 p50 {baselines[name]['b1_p50_ms']:.3f} ms, "
            f"b32 CPU {baselines[name]['b32_cpu_us_per_sample']:.0f} us/sample",
            flush=True,
        )
    proc, http_url, grpc_url = start_server(work / "repo", args.serve_arg)
    rows: list[dict[str, Any]] = []
    table: list[list[str]] = []
    try:
        for name in names:
            shape = MODELS[name][1]
            inputs = {"x": np.random.default_rng(2).standard_normal((1, *shape)).astype(np.float32)}
            for proto in args.protocols.split(","):
                for c in (int(v) for v in args.concurrency.split(",")):
                    if proto == "grpc":
                        r = run_load(
                            grpc_url, name, inputs, concurrency=c, duration_s=args.duration, server_pid=proc.pid
                        )
                    else:
                        r = run_load_rest(
                            http_url, name, inputs, concurrency=c, duration_s=args.duration, server_pid=proc.pid
                        )
                    r.update(protocol=proto, baseline=baselines[name])
                    rows.append(r)
                    table.append(_row(name, proto, r, baselines[name]))
                    print("  ".join(table[-1]), flush=True)
            c1 = paired_c1(work / "repo" / name / "1" / "model.onnx", name, shape, http_url, grpc_url)
            baselines[name]["paired_c1"] = c1
            print(
                f"{name} c=1 interleaved p50: in-process {c1['in_process_p50_ms']:.3f} ms, "
                f"gRPC {c1['grpc_p50_ms']:.3f} ms, REST {c1['rest_p50_ms']:.3f} ms",
                flush=True,
            )
    finally:
        proc.terminate()
        proc.wait(60)
    print()
    print(
        ui.table(
            [
                "model",
                "proto",
                "c",
                "req/s",
                "p50 ms",
                "p95 ms",
                "p99 ms",
                "srv CPU us/req",
                "CPU/req ÷ b32 CPU/sample",
                "errors",
            ],
            table,
        )
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "load_avg_at_end": os.getloadavg(),
        "serve_args": args.serve_arg,
        "duration_s": args.duration,
    }
    args.out.write_text(json.dumps({"meta": meta, "baselines": baselines, "rows": rows}, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
