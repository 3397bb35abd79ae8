"""A fast KServe v2 gRPC load client: closed-loop concurrency, req/s, latency, server CPU per request.

Why not tritonclient or perf_analyzer: the client shares the benchmark box's
cores with the server, so it must cost as little CPU as possible. The request
is serialised once; each call sends those bytes and does not parse the answer
(only its size is checked), on grpc.aio channels, spread over ``procs``
processes. Server CPU is read from the server process's own counters
(``psutil``) over exactly the measured window, so ``server_cpu_us_per_req`` is
independent of the client's cost.

Library use (other benchmarks put benchmarks/ on sys.path, as benchmarks/serve.py does)::

    from serve_grpc_client import run_load
    result = run_load("127.0.0.1:8001", "affine", {"x": np.ones((1, 1), np.float32)},
                      concurrency=8, duration_s=5, server_pid=pid)

CLI::

    python benchmarks/serve_grpc_client.py --url 127.0.0.1:8001 --model affine \
        --input x:FP32:1,1 --concurrency 1,8,32 --duration 5 --server-pid PID --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

METHOD = "/inference.GRPCInferenceService/ModelInfer"
_OPTIONS = [("grpc.max_receive_message_length", 256 << 20), ("grpc.max_send_message_length", 256 << 20)]


def build_request(model: str, inputs: dict[str, np.ndarray], version: str = "") -> bytes:
    """One serialised ModelInferRequest with every input in raw_input_contents."""
    from fwx.serving.codecs import datatype_of, encode_raw
    from fwx.serving.proto import grpc_service_pb2 as pb

    req = pb.ModelInferRequest(model_name=model, model_version=version)
    for name, arr in inputs.items():
        req.inputs.add(name=name, datatype=datatype_of(arr), shape=list(arr.shape))
        req.raw_input_contents.append(encode_raw(arr))
    return bytes(req.SerializeToString())


async def _worker_async(
    url: str, payload: bytes, concurrency: int, start_at: float, stop_at: float, channels: int
) -> dict[str, Any]:
    import grpc

    chans = [
        grpc.aio.insecure_channel(url, options=[*_OPTIONS, ("grpc.use_local_subchannel_pool", 1)])
        for _ in range(channels)
    ]
    calls = [ch.unary_unary(METHOD) for ch in chans]  # no (de)serialiser: bytes in, bytes out
    latencies: list[float] = []
    errors: dict[str, int] = {}

    async def loop(i: int) -> None:
        call = calls[i % len(calls)]
        while True:
            t0 = time.time()
            if t0 >= stop_at:
                return
            try:
                await call(payload, timeout=30)
                if t0 >= start_at:
                    latencies.append(time.time() - t0)
            except grpc.aio.AioRpcError as exc:
                if t0 >= start_at:
                    key = exc.code().name
                    errors[key] = errors.get(key, 0) + 1

    await asyncio.gather(*(loop(i) for i in range(concurrency)))
    for ch in chans:
        await ch.close()
    return {"latencies": latencies, "errors": errors}


def _worker(args: tuple[str, bytes, int, float, float, int]) -> dict[str, Any]:
    return asyncio.run(_worker_async(*args))


def _split(total: int, parts: int) -> list[int]:
    return [
        total // parts + (1 if i < total % parts else 0) for i in range(parts) if total // parts or i < total % parts
    ]


def _cpu_seconds(pid: int | tuple[int, ...] | None) -> float | None:
    """CPU seconds of a server process and its children; of several (a front end + fwx) when given a tuple."""
    if pid is None:
        return None
    import psutil

    total = 0.0
    for one in (pid,) if isinstance(pid, int) else pid:
        proc = psutil.Process(one)
        t = proc.cpu_times()
        total += t.user + t.system
        for child in proc.children(recursive=True):
            ct = child.cpu_times()
            total += ct.user + ct.system
    return float(total)


def run_load(
    url: str,
    model: str,
    inputs: dict[str, np.ndarray],
    *,
    concurrency: int = 1,
    duration_s: float = 5.0,
    warmup_s: float = 1.0,
    procs: int = 1,
    channels_per_proc: int = 1,
    server_pid: int | tuple[int, ...] | None = None,
    version: str = "",
) -> dict[str, Any]:
    """Run closed-loop load and return {req_per_s, latency_ms: {p50,p95,p99,mean}, errors, server_cpu_us_per_req}."""
    payload = build_request(model, inputs, version)
    shares = _split(concurrency, max(1, min(procs, concurrency)))
    start_at = time.time() + warmup_s + (1.5 if len(shares) > 1 else 0.2)  # leave time for spawned workers
    stop_at = start_at + duration_s
    jobs = [(url, payload, c, start_at, stop_at, channels_per_proc) for c in shares]
    pool: concurrent.futures.Executor = (
        concurrent.futures.ProcessPoolExecutor(len(jobs), mp_context=mp.get_context("spawn"))
        if len(jobs) > 1
        else concurrent.futures.ThreadPoolExecutor(1)
    )
    with pool:
        futures = [pool.submit(_worker, job) for job in jobs]
        time.sleep(max(0.0, start_at - time.time()))
        cpu0 = _cpu_seconds(server_pid)
        time.sleep(max(0.0, stop_at - time.time()))
        cpu1 = _cpu_seconds(server_pid)
        results = [f.result(timeout=duration_s + warmup_s + 120) for f in futures]
    lat = np.array([x for r in results for x in r["latencies"]], dtype=np.float64) * 1e3
    errors: dict[str, int] = {}
    for r in results:
        for k, v in r["errors"].items():
            errors[k] = errors.get(k, 0) + v
    n = int(lat.size)
    out: dict[str, Any] = {
        "model": model,
        "concurrency": concurrency,
        "procs": len(jobs),
        "duration_s": duration_s,
        "requests": n,
        "req_per_s": n / duration_s,
        "errors": errors,
        "latency_ms": {
            k: float(np.percentile(lat, q)) if n else None for k, q in (("p50", 50), ("p95", 95), ("p99", 99))
        },
    }
    out["latency_ms"]["mean"] = float(lat.mean()) if n else None
    if cpu0 is not None and cpu1 is not None and n:
        out["server_cpu_s"] = cpu1 - cpu0
        out["server_cpu_us_per_req"] = (cpu1 - cpu0) / n * 1e6
        out["server_cores_busy"] = (cpu1 - cpu0) / duration_s
    return out


def parse_input(spec: str) -> tuple[str, np.ndarray]:
    """``x:FP32:1,3`` -> ("x", ones of that shape and dtype)."""
    from fwx.serving.codecs import np_dtype

    name, datatype, shape = spec.split(":")
    dims = [int(d) for d in shape.split(",") if d]
    return name, np.ones(dims, dtype=np_dtype(name, datatype))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="127.0.0.1:8001")
    ap.add_argument("--model", required=True)
    ap.add_argument("--version", default="")
    ap.add_argument("--input", action="append", required=True, help="NAME:DATATYPE:d1,d2 (repeatable)")
    ap.add_argument("--concurrency", default="1,8,32", help="comma-separated list")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--procs", type=int, default=1, help="client processes (concurrency is split across them)")
    ap.add_argument("--channels", type=int, default=1, help="gRPC channels per client process")
    ap.add_argument("--server-pid", type=int)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    inputs = dict(parse_input(s) for s in args.input)
    rows = []
    for c in (int(x) for x in args.concurrency.split(",")):
        r = run_load(
            args.url,
            args.model,
            inputs,
            concurrency=c,
            duration_s=args.duration,
            warmup_s=args.warmup,
            procs=args.procs,
            channels_per_proc=args.channels,
            server_pid=args.server_pid,
            version=args.version,
        )
        rows.append(r)
        cpu = r.get("server_cpu_us_per_req")
        print(
            f"c={c:<4} {r['req_per_s']:9.0f} req/s  p50 {r['latency_ms']['p50'] or 0:7.3f} ms  "
            f"p99 {r['latency_ms']['p99'] or 0:7.3f} ms  server CPU "
            f"{'-' if cpu is None else f'{cpu:6.0f}'} us/req  errors {r['errors'] or 0}",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
