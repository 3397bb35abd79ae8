"""fwx's data plane with no transport: what an in-process native gRPC front end would add its own cost to.

Decode a serialised ModelInferRequest, ``DataPlane.handle_infer`` (auth, schema
check, batcher, onnxruntime on a compute thread, response), encode the
ModelInferResponse: everything fwx does per gRPC call except grpcio. Closed
loop at concurrency 1 and 32 on one event loop; CPU per request from this
process's own counters. Also the bare runtime at batch 1 and 32.

    python benchmarks/peers/native_grpc/inprocess_dataplane.py
"""

from __future__ import annotations

import asyncio
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
sys.path.insert(0, str(HERE.parent.parent.parent))

from serve_grpc_client import build_request  # noqa: E402
from serve_models import MODELS, publish  # noqa: E402


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def main(seconds: float = 4.0) -> None:
    from fwx.serving.config import ServerConfig
    from fwx.serving.dataplane import build_dataplane
    from fwx.serving.grpc import codecs
    from fwx.serving.proto import grpc_service_pb2 as pb

    work = Path(tempfile.mkdtemp(prefix="fwx-inprocess-"))
    build, shape = MODELS["small_cnn"]
    publish(work / "repo", "small_cnn", build()[0], shape)
    dp = build_dataplane(ServerConfig(repository=work / "repo", grpc_port=-1, http_port=-1))
    await dp.manager.start()
    x = np.random.default_rng(0).standard_normal((1, *shape)).astype(np.float32)
    raw = build_request("small_cnn", {"x": x})

    async def one() -> None:
        request = codecs.decode_infer_request(pb.ModelInferRequest.FromString(raw), None)

        async def decoded() -> tuple[Any, None]:
            return request, None

        _, _, response = await dp.handle_infer(decoded)
        codecs.encode_infer_response(response).SerializeToString()

    for c in (1, 32):
        for window in (1.0, seconds):  # warm-up, then measured
            done, stop = 0, time.time() + window
            latencies: list[float] = []

            async def loop(stop: float = stop, latencies: list[float] = latencies) -> None:
                nonlocal done
                while time.time() < stop:
                    t0 = time.perf_counter()
                    await one()
                    latencies.append(time.perf_counter() - t0)
                    done += 1

            c0, t0 = _cpu(), time.time()
            await asyncio.gather(*(loop() for _ in range(c)))
            wall, used = time.time() - t0, _cpu() - c0
        print(
            f"data plane c={c}: {done / wall:.0f} req/s, {used / done * 1e6:.0f} us CPU/req, "
            f"p50 {np.percentile(latencies, 50) * 1e3:.3f} ms"
        )
    runtime = dp.manager.get("small_cnn", None).runtime
    for b in (1, 32):
        xb, n, c0, t0 = np.repeat(x, b, 0), 0, _cpu(), time.time()
        while time.time() < t0 + 2:
            runtime.infer({"x": xb})
            n += 1
        print(
            f"runtime batch {b}: {(_cpu() - c0) / (n * b) * 1e6:.1f} us CPU/sample, {(time.time() - t0) / n * 1e3:.3f} ms/call"
        )


if __name__ == "__main__":
    asyncio.run(main())
