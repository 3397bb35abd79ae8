"""The in-process native gRPC prototype: libgrpc++ (``_fwx_native_grpc``) in front of fwx's data plane.

Measures the README's "native gRPC server inside the fwx process" design
instead of estimating it: gRPC's C++ threads read each ModelInfer call, the
event loop drains them on one eventfd wake-up, each goes through
``DataPlane.handle_infer`` (auth, schema check, batcher, runtime) exactly as
the grpc.aio transport sends it, and the serialised ModelInferResponse goes
back as bytes. Only ModelInfer; no deadlines, health or metadata RPCs: a
measurement, not a transport.

    python benchmarks/peers/native_grpc/inprocess_server.py REPO --port-file PATH
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# grpc.StatusCode numbers by name, so that grpcio (a second gRPC core) is never imported here
_CODES = {
    "CANCELLED": 1,
    "INVALID_ARGUMENT": 3,
    "DEADLINE_EXCEEDED": 4,
    "NOT_FOUND": 5,
    "PERMISSION_DENIED": 7,
    "RESOURCE_EXHAUSTED": 8,
    "FAILED_PRECONDITION": 9,
    "UNIMPLEMENTED": 12,
    "INTERNAL": 13,
    "UNAVAILABLE": 14,
    "UNAUTHENTICATED": 16,
}


async def serve(repo: Path, port_file: Path) -> None:
    sys.path.insert(0, str(HERE / "build"))
    import _fwx_native_grpc as native

    from fwx.errors import FwxError, InputError
    from fwx.serving.config import ServerConfig
    from fwx.serving.dataplane import build_dataplane
    from fwx.serving.grpc import codecs
    from fwx.serving.proto import grpc_service_pb2 as pb

    dp = build_dataplane(ServerConfig(repository=repo, grpc_port=-1, http_port=-1))
    await dp.manager.start()
    parse = pb.ModelInferRequest.FromString

    async def one(handle: int, raw: bytes, auth: bytes | None) -> None:
        async def decode() -> tuple[Any, None]:
            try:
                msg = parse(raw)
            except Exception as exc:  # noqa: BLE001 - the client's bytes
                raise InputError("the ModelInfer request is not a valid protobuf message") from exc
            return codecs.decode_infer_request(msg, None), None

        try:
            _, _, response = await dp.handle_infer(decode, auth=auth.decode("latin-1") if auth else None)
            native.reply(handle, codecs.encode_infer_response(response).SerializeToString())
        except FwxError as exc:
            native.fail(handle, _CODES.get(exc.grpc_code, 13), exc.message)
        except BaseException as exc:  # noqa: BLE001 - every handle gets exactly one answer
            native.fail(handle, 13, f"internal error ({type(exc).__name__})")

    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()

    def ready() -> None:
        for handle, raw, auth in native.drain():
            task = loop.create_task(one(handle, raw, auth))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    port, fd = native.start(0)
    loop.add_reader(fd, ready)
    port_file.with_suffix(".tmp").write_text(str(port))
    port_file.with_suffix(".tmp").rename(port_file)
    await asyncio.Event().wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("repo", type=Path)
    ap.add_argument("--port-file", type=Path, required=True)
    args = ap.parse_args()
    asyncio.run(serve(args.repo, args.port_file))
    return 0


if __name__ == "__main__":
    sys.exit(main())
