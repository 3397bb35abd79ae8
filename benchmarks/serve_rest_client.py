"""A cheap KServe v2 REST load client: raw HTTP/1.1 keep-alive sockets, binary tensor extension.

The request bytes (headers + JSON header + raw tensor) are built once; each
call writes them and reads one response (status line, Content-Length, body),
so the client costs far less CPU than an HTTP library would on a box it shares
with the server. Output matches ``serve_grpc_client.run_load``.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import numpy as np
from serve_grpc_client import _cpu_seconds


def build_request(host: str, port: int, model: str, inputs: dict[str, np.ndarray]) -> bytes:
    """One POST .../infer using the binary tensor extension, outputs asked for in binary too."""
    from fwx.serving.codecs import datatype_of, encode_raw

    blobs = [encode_raw(a) for a in inputs.values()]
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": n,
                    "shape": list(a.shape),
                    "datatype": datatype_of(a),
                    "parameters": {"binary_data_size": len(b)},
                }
                for (n, a), b in zip(inputs.items(), blobs, strict=True)
            ],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    body = header + b"".join(blobs)
    head = (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/octet-stream\r\nInference-Header-Content-Length: {len(header)}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


async def _one_connection(
    host: str,
    port: int,
    payload: bytes,
    start_at: float,
    stop_at: float,
    latencies: list[float],
    errors: dict[str, int],
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while True:
            t0 = time.time()
            if t0 >= stop_at:
                return
            writer.write(payload)
            head = await reader.readuntil(b"\r\n\r\n")
            status = head[9:12]
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            if t0 >= start_at:
                if status == b"200":
                    latencies.append(time.time() - t0)
                else:
                    key = status.decode()
                    errors[key] = errors.get(key, 0) + 1
    finally:
        writer.close()


async def _load(
    host: str, port: int, payload: bytes, concurrency: int, start_at: float, stop_at: float
) -> tuple[list[float], dict[str, int]]:
    latencies: list[float] = []
    errors: dict[str, int] = {}
    await asyncio.gather(
        *(_one_connection(host, port, payload, start_at, stop_at, latencies, errors) for _ in range(concurrency))
    )
    return latencies, errors


def run_load_rest(
    url: str,
    model: str,
    inputs: dict[str, np.ndarray],
    *,
    concurrency: int = 1,
    duration_s: float = 5.0,
    warmup_s: float = 1.0,
    server_pid: int | tuple[int, ...] | None = None,
) -> dict[str, Any]:
    """Closed-loop load over REST; same result keys as ``serve_grpc_client.run_load``."""
    import threading

    host, port = url.removeprefix("http://").rsplit(":", 1)
    payload = build_request(host, int(port), model, inputs)
    start_at = time.time() + warmup_s
    stop_at = start_at + duration_s
    box: dict[str, Any] = {}
    worker = threading.Thread(
        target=lambda: box.update(r=asyncio.run(_load(host, int(port), payload, concurrency, start_at, stop_at)))
    )
    worker.start()
    time.sleep(max(0.0, start_at - time.time()))
    cpu0 = _cpu_seconds(server_pid)
    time.sleep(max(0.0, stop_at - time.time()))
    cpu1 = _cpu_seconds(server_pid)
    worker.join(duration_s + warmup_s + 60)
    latencies, errors = box["r"]
    lat = np.array(latencies) * 1e3
    n = int(lat.size)
    out: dict[str, Any] = {
        "model": model,
        "concurrency": concurrency,
        "duration_s": duration_s,
        "requests": n,
        "req_per_s": n / duration_s,
        "errors": errors,
        "latency_ms": {
            k: float(np.percentile(lat, q)) if n else None for k, q in (("p50", 50), ("p95", 95), ("p99", 99))
        },
    }
    if cpu0 is not None and cpu1 is not None and n:
        out["server_cpu_us_per_req"] = (cpu1 - cpu0) / n * 1e6
        out["server_cores_busy"] = (cpu1 - cpu0) / duration_s
    return out
