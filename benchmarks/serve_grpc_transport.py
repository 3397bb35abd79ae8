"""Server CPU per request and req/s of fwx's gRPC transport alone, server in a subprocess.

The server is ``create_grpc_server`` over a data plane whose ``infer`` returns
its input: what is measured is protobuf parse, raw decode, response encode and
grpc.aio, i.e. what the gRPC layer itself costs per request. The full stack
(batcher, runtime, a real model) is measured by benchmarks/serve.py
(``--protocols grpc``), which uses the same load client.

Prints a table and writes bench-results/serve_grpc.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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


class EchoDataPlane:
    """The smallest object honouring the data plane's contract: answers with its inputs."""

    def live(self) -> bool:
        return True

    def ready(self) -> bool:
        return True

    async def handle_infer(self, decode: Any, *, auth: str | None = None) -> Any:
        request, extra = await decode()
        return request, extra, await self.infer(request)

    async def infer(self, request: Any) -> Any:
        from fwx.serving.types import InferResponse, InferTensor

        outs = [InferTensor("y", t.datatype, t.shape, t.data) for t in request.inputs]
        return InferResponse(request.model_name, "1", outs, id=request.id)


async def _serve_echo(port_file: Path) -> None:
    from fwx.serving.config import ServerConfig
    from fwx.serving.grpc.server import bound_port, create_grpc_server

    config = ServerConfig(repository=Path("."), grpc_port=0, http_port=-1)
    server = create_grpc_server(EchoDataPlane(), config)
    await server.start()
    port_file.write_text(str(bound_port(server)))
    await server.wait_for_termination()


_SERVER_CPUS: set[int] | None = None


def _pin_server() -> None:
    if _SERVER_CPUS:
        os.sched_setaffinity(0, _SERVER_CPUS)


def _pin(enabled: bool) -> None:
    """Server on the last CPU, this process (and its client workers) on the others: steadier numbers."""
    global _SERVER_CPUS
    cpus = sorted(os.sched_getaffinity(0))
    if enabled and len(cpus) >= 2:
        _SERVER_CPUS = {cpus[-1]}
        os.sched_setaffinity(0, set(cpus[:-1]))


def _start(cmd: list[str], port_file: Path, timeout: float = 120) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(HERE.parent)}, preexec_fn=_pin_server)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if port_file.exists() and port_file.read_text().strip():
            return proc
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("server did not start")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--serve-echo", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--shape", default="1,16", help="FP32 input shape")
    ap.add_argument("--pin", action="store_true", help="pin the server to the last CPU, the client to the rest")
    ap.add_argument("--out", type=Path, default=Path("bench-results/serve_grpc_transport.json"))
    args = ap.parse_args()
    if args.serve_echo:
        asyncio.run(_serve_echo(args.serve_echo))
        return 0
    _pin(args.pin)
    port_file = Path(tempfile.gettempdir()) / f"fwx-grpc-bench-{os.getpid()}.port"
    port_file.unlink(missing_ok=True)
    proc = _start([sys.executable, __file__, "--serve-echo", str(port_file)], port_file)
    url = f"127.0.0.1:{port_file.read_text().strip()}"
    port_file.unlink(missing_ok=True)
    inputs = {"x": np.ones([int(d) for d in args.shape.split(",")], np.float32)}
    rows = []
    try:
        for c in (int(v) for v in args.concurrency.split(",")):
            r = run_load(
                url, "echo", inputs, concurrency=c, duration_s=args.duration, procs=args.procs, server_pid=proc.pid
            )
            rows.append(r)
            print(
                f"echo c={c:<3} procs={r['procs']}  {r['req_per_s']:7.0f} req/s  p50 {r['latency_ms']['p50']:.3f} ms  "
                f"p99 {r['latency_ms']['p99']:.3f} ms  server {r['server_cpu_us_per_req']:.0f} us CPU/req  "
                f"({r['server_cores_busy']:.2f} cores)  errors {r['errors'] or 0}",
                flush=True,
            )
    finally:
        proc.terminate()
        proc.wait(30)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"cpus": os.cpu_count(), "pinned": args.pin, "shape": args.shape, "load_avg_at_end": os.getloadavg()}
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
