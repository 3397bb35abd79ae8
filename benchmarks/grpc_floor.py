"""What Python grpcio itself costs per unary call: the floor under fwx's gRPC transport.

Each mode is a server subprocess answering ``ModelInfer`` on the same load
client (benchmarks/serve_grpc_client.py, the request fwx's benchmarks send);
server CPU per request is read from the server's own counters:

* ``sync-bytes``: ``grpc.server`` (thread pool), a generic handler, raw bytes
  in and a fixed response out: no protobuf, no event loop: grpcio's floor;
* ``aio-bytes``: the same on ``grpc.aio`` (one asyncio loop, no threads);
* ``aio-decode``: ``aio-bytes`` plus parsing the ModelInferRequest, the raw
  tensor into numpy (zero-copy) and a serialised ModelInferResponse: the floor
  of any KServe v2 transport on grpc.aio;
* ``sync-hop``: ``sync-bytes`` plus one ``run_coroutine_threadsafe`` hop to an
  asyncio loop thread and back: what fwx's handler-thread -> loop bridge costs;
* ``fwx``: fwx's real transport (``create_grpc_server``) over an echo data plane;
* ``aio-fwx``: fwx's codecs and the same echo data plane awaited directly from a
  ``grpc.aio`` generic handler on the loop (no thread hop);
* ``native-echo`` / ``native-decode``: the C++ server of benchmarks/peers/native_grpc
  (libgrpc++ callback API, generic service) doing what ``aio-bytes`` /
  ``aio-decode`` do: the floor of a native gRPC front end. Built on first use by
  benchmarks/peers/native_grpc/build.sh (needs Debian's libgrpc++-dev,
  protobuf-compiler, protobuf-compiler-grpc); skipped with one line if it cannot be.

Prints a table (median of the repeats, with min-max) and writes
bench-results/grpc_floor.json.

    .venv/bin/python benchmarks/grpc_floor.py --concurrency 1,32 --repeats 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
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

from serve_grpc_client import METHOD, run_load  # noqa: E402

MODES = ("sync-bytes", "aio-bytes", "aio-decode", "sync-hop", "fwx", "aio-fwx", "native-echo", "native-decode")
NATIVE_DIR = HERE / "peers" / "native_grpc"
SERVICE, _, RPC = METHOD.strip("/").partition("/")


def _response() -> bytes:
    from fwx.serving.proto import grpc_service_pb2 as pb

    resp = pb.ModelInferResponse(model_name="m", model_version="1")
    resp.outputs.add(name="y", datatype="FP32", shape=[1, 10])
    resp.raw_output_contents.append(np.zeros(10, np.float32).tobytes())
    return bytes(resp.SerializeToString())


def _decode_encode(raw: bytes) -> bytes:
    from fwx.serving.proto import grpc_service_pb2 as pb

    req = pb.ModelInferRequest.FromString(raw)
    arrays = [
        np.frombuffer(b, np.float32).reshape(list(t.shape))
        for t, b in zip(req.inputs, req.raw_input_contents, strict=True)
    ]
    resp = pb.ModelInferResponse(model_name=req.model_name, model_version="1", id=req.id)
    resp.outputs.add(name="y", datatype="FP32", shape=[1, 10])
    resp.raw_output_contents.append(arrays[0].reshape(-1)[:10].tobytes())
    return bytes(resp.SerializeToString())


def _handler(fn: Any, *, aio: bool) -> Any:
    import grpc

    method = grpc.unary_unary_rpc_method_handler(fn)  # no (de)serialisers: bytes in, bytes out
    return grpc.method_handlers_generic_handler(SERVICE, {RPC: method})


async def _serve(mode: str, port_file: Path) -> None:
    import concurrent.futures

    import grpc

    resp = _response()
    if mode == "fwx":
        from serve_grpc_transport import EchoDataPlane

        from fwx.serving.config import ServerConfig
        from fwx.serving.grpc.server import create_grpc_server

        fwx_server = create_grpc_server(EchoDataPlane(), ServerConfig(repository=Path("."), grpc_port=0, http_port=-1))
        await fwx_server.start()
        port_file.write_text(str(fwx_server.port))
        await asyncio.Event().wait()
    if mode.startswith("aio"):
        from serve_grpc_transport import EchoDataPlane

        from fwx.serving.grpc import codecs
        from fwx.serving.proto import grpc_service_pb2 as pb

        echo = EchoDataPlane()

        async def answer(raw: bytes, ctx: Any) -> bytes:
            if mode == "aio-fwx":
                decoded = codecs.decode_infer_request(pb.ModelInferRequest.FromString(raw), None)

                async def decode() -> Any:
                    return decoded, None

                _, _, response = await echo.handle_infer(decode)
                return bytes(codecs.encode_infer_response(response).SerializeToString())
            return _decode_encode(raw) if mode == "aio-decode" else resp

        aserver = grpc.aio.server()
        aserver.add_generic_rpc_handlers((_handler(answer, aio=True),))
        port = aserver.add_insecure_port("127.0.0.1:0")
        await aserver.start()
        port_file.write_text(str(port))
        await aserver.wait_for_termination()
        return
    loop = asyncio.get_running_loop()

    async def on_loop() -> bytes:
        return resp

    def sync_answer(raw: bytes, ctx: Any) -> bytes:
        if mode == "sync-hop":
            return asyncio.run_coroutine_threadsafe(on_loop(), loop).result()
        return resp

    server = grpc.server(concurrent.futures.ThreadPoolExecutor(64))
    server.add_generic_rpc_handlers((_handler(sync_answer, aio=False),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    port_file.write_text(str(port))
    await asyncio.Event().wait()


def build_native() -> Path | None:
    """benchmarks/peers/native_grpc/build/native_grpc, built if needed; None (and why, on stderr) if it cannot be."""
    done = subprocess.run([str(NATIVE_DIR / "build.sh")], check=False, env={**os.environ, "PYTHON": sys.executable})
    binary = NATIVE_DIR / "build" / "native_grpc"
    return binary if done.returncode == 0 and binary.exists() else None


def start_native(binary: Path, mode: str, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """Start the C++ server in ``mode`` (echo, decode, forward) on a free port; (process, host:port)."""
    work = Path(tempfile.mkdtemp(prefix="fwx-grpc-native-"))
    (work / "response").write_bytes(_response())
    port_file = work / "port"
    cmd = [str(binary), mode, "--port-file", str(port_file), "--response", str(work / "response"), *extra]
    return _wait_port(subprocess.Popen(cmd), port_file)


def _start(mode: str) -> tuple[subprocess.Popen[bytes], str]:
    port_file = Path(tempfile.mkdtemp(prefix="fwx-grpc-floor-")) / "port"
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", mode, "--port-file", str(port_file)],
        env={**os.environ, "PYTHONPATH": str(HERE.parent)},
    )
    return _wait_port(proc, port_file)


def _wait_port(proc: subprocess.Popen[bytes], port_file: Path) -> tuple[subprocess.Popen[bytes], str]:
    end = time.time() + 60
    while time.time() < end and not (port_file.exists() and port_file.read_text()):
        time.sleep(0.05)
    return proc, f"127.0.0.1:{port_file.read_text()}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--concurrency", default="1,32")
    ap.add_argument("--duration", type=float, default=4.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--port-file", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=HERE.parent / "bench-results" / "grpc_floor.json")
    args = ap.parse_args()
    if args.serve:
        asyncio.run(_serve(args.serve, args.port_file))
        return 0
    from fwx import ui

    modes = args.modes.split(",")
    native = build_native() if any(m.startswith("native-") for m in modes) else None
    if native is None and any(m.startswith("native-") for m in modes):
        print("skipping the native-* modes: benchmarks/peers/native_grpc could not be built (see above)")
        modes = [m for m in modes if not m.startswith("native-")]
    servers = {
        m: start_native(native, m.removeprefix("native-")) if native and m.startswith("native-") else _start(m)
        for m in modes
    }
    x = {"x": np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    raw: dict[str, list[dict[str, Any]]] = {}
    try:
        for rep in range(args.repeats):
            for mode in modes if rep % 2 == 0 else list(reversed(modes)):
                proc, url = servers[mode]
                for c in (int(v) for v in args.concurrency.split(",")):
                    r = run_load(url, "small_cnn", x, concurrency=c, duration_s=args.duration, server_pid=proc.pid)
                    raw.setdefault(f"{mode}/{c}", []).append(
                        {
                            "req_per_s": r["req_per_s"],
                            "cpu_us": r.get("server_cpu_us_per_req"),
                            "p50_ms": r["latency_ms"]["p50"],
                            "errors": r["errors"],
                        }
                    )
                    print(
                        f"run {rep + 1} {mode} c={c}: {r['req_per_s']:.0f} req/s, "
                        f"{r.get('server_cpu_us_per_req') or 0:.0f} us CPU/req, errors {r['errors']}",
                        flush=True,
                    )
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(30)
    summary: dict[str, Any] = {}
    table = []
    for key, runs in raw.items():
        s = {
            k: {"median": statistics.median(v), "min": min(v), "max": max(v)}
            for k in ("req_per_s", "cpu_us", "p50_ms")
            if (v := [float(r[k]) for r in runs if r[k] is not None])
        }
        summary[key] = s
        mode, c = key.split("/")
        table.append(
            [mode, c]
            + [
                f"{s[k]['median']:.{d}f} ({s[k]['min']:.{d}f}-{s[k]['max']:.{d}f})"
                for k, d in (("cpu_us", 0), ("req_per_s", 0), ("p50_ms", 2))
            ]
        )
    print()
    print(ui.table(["mode", "c", "server CPU us/req", "req/s", "p50 ms"], table))
    meta = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "cpus": os.cpu_count(),
        "duration_s": args.duration,
        "repeats": args.repeats,
        "load_avg_at_end": os.getloadavg(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "summary": summary, "runs": raw}, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
