"""Measure MLServer 1.7.1 on the same two models and the same gRPC load client as benchmarks/serve.py.

Needs ``benchmarks/peers/setup_mlserver.sh`` first. Writes the model folders
(model.onnx + model-settings.json with adaptive batching at the same limits
fwx uses: max batch 32, 2 ms), starts ``mlserver start`` from the peer venv,
and runs ``serve_grpc_client.run_load`` at concurrency 1, 8, 32 with the
server's CPU read from its process tree. Writes bench-results/serve_mlserver.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent.parent))

from serve_grpc_client import run_load  # noqa: E402
from serve_models import MODELS  # noqa: E402

VENV = HERE / ".venv-mlserver"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_models(root: Path, names: list[str], batching: bool) -> None:
    """One folder per model: model.onnx, model-settings.json, settings.json for ports."""
    shutil.rmtree(root, ignore_errors=True)
    for name in names:
        folder = root / name
        folder.mkdir(parents=True)
        onnx_bytes, _ = MODELS[name][0]()
        (folder / "model.onnx").write_bytes(onnx_bytes)
        settings: dict[str, Any] = {
            "name": name,
            "implementation": "onnx_runtime.OnnxModel",
            "parameters": {"uri": "./model.onnx"},
        }
        if batching:
            settings.update(max_batch_size=32, max_batch_time=0.002)
        (folder / "model-settings.json").write_text(json.dumps(settings, indent=2))
    shutil.copy(HERE / "onnx_runtime.py", root / "onnx_runtime.py")


def start(root: Path, parallel_workers: int | None) -> tuple[subprocess.Popen[bytes], str]:
    import grpc

    http, grpc_port, metrics = _free_port(), _free_port(), _free_port()
    settings: dict[str, Any] = {"http_port": http, "grpc_port": grpc_port, "metrics_port": metrics, "debug": False}
    if parallel_workers is not None:
        settings["parallel_workers"] = parallel_workers
    (root / "settings.json").write_text(json.dumps(settings))
    proc = subprocess.Popen(
        [str(VENV / "bin" / "mlserver"), "start", str(root)],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    url = f"127.0.0.1:{grpc_port}"
    deadline = time.time() + 180
    from fwx.serving.proto import grpc_service_pb2 as pb
    from fwx.serving.proto import grpc_service_pb2_grpc as pb_grpc

    with grpc.insecure_channel(url) as ch:
        stub = pb_grpc.GRPCInferenceServiceStub(ch)
        while time.time() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"mlserver exited with {proc.returncode}")
            try:
                if stub.ServerReady(pb.ServerReadyRequest(), timeout=1).ready:
                    return proc, url
            except grpc.RpcError:
                pass
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("mlserver did not become ready")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--no-batching", action="store_true", help="MLServer's default (adaptive batching off)")
    ap.add_argument(
        "--parallel-workers",
        type=int,
        default=None,
        help="MLServer inference worker processes (default: MLServer's own default, 1)",
    )
    ap.add_argument("--out", type=Path, default=HERE.parent.parent / "bench-results" / "serve_mlserver.json")
    args = ap.parse_args()
    if not (VENV / "bin" / "mlserver").exists():
        raise SystemExit(f"run {HERE / 'setup_mlserver.sh'} first")
    names = args.models.split(",")
    root = HERE / "models"
    write_models(root, names, batching=not args.no_batching)
    proc, url = start(root, args.parallel_workers)
    rows = []
    try:
        for name in names:
            x = np.random.default_rng(2).standard_normal((1, *MODELS[name][1])).astype(np.float32)
            for c in (int(v) for v in args.concurrency.split(",")):
                r = run_load(url, name, {"x": x}, concurrency=c, duration_s=args.duration, server_pid=proc.pid)
                r["protocol"] = "grpc"
                rows.append(r)
                lat = r["latency_ms"]
                print(
                    f"mlserver {name} grpc c={c}: {r['req_per_s']:.0f} req/s p50 {lat['p50']:.2f} p95 {lat['p95']:.2f} "
                    f"p99 {lat['p99']:.2f} ms, server CPU {r.get('server_cpu_us_per_req', 0):.0f} us/req, "
                    f"errors {r['errors']}",
                    flush=True,
                )
    finally:
        proc.terminate()
        proc.wait(60)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "server": "mlserver==1.7.1",
                "batching": not args.no_batching,
                "parallel_workers": args.parallel_workers,
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
