"""Tiny real ONNX versions for the lifecycle tests, published the way fwx export does.

Version ``v`` computes ``y = 2 * x + v``, so every answer says which version
produced it, independently of the ``model_version`` field.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fwx.manifest import ArtifactEntry, Manifest, SourceInfo, sha256_path
from fwx.repository import Repository
from fwx.signature import Signature, TensorSpec

SIG = Signature((TensorSpec("x", "float32", ("N", 1)),), (TensorSpec("y", "float32", ("N", 1)),))
#: A FlatBuffer header with no body: TFLite's unverified reader reads out of bounds (TF #115308).
CRASHING_TFLITE = b"\x18\x00\x00\x00TFL3"


def onnx_bytes(bias: float, *, slow_ops: int = 0, slow_dim: int = 512, per_row: bool = False) -> bytes:
    """``y = 2x + bias``; ``slow_ops`` adds that many MatMuls by a [D,D] identity to make it take time.

    The slow branch depends on the input (so onnxruntime cannot fold it away),
    multiplies by the identity (so values stay finite) and adds 0 to ``y``. It
    works on a [D,D] block per call, or with ``per_row`` on [N,D] (cost grows
    with the batch, so batching cannot hide it).
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [
        numpy_helper.from_array(np.array([[2.0]], np.float32), "w"),
        numpy_helper.from_array(np.array([bias], np.float32), "b"),
    ]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y0"])]
    last = "y0"
    if slow_ops:
        zshape = (1, slow_dim) if per_row else (slow_dim, slow_dim)
        inits += [
            numpy_helper.from_array(np.eye(slow_dim, dtype=np.float32), "eye"),
            numpy_helper.from_array(np.zeros(zshape, np.float32), "z"),
        ]
        if per_row:
            nodes.append(helper.make_node("Add", ["xw", "z"], ["h0"]))  # [N,1] + [1,D] -> [N,D]
        else:
            nodes += [
                helper.make_node("ReduceSum", ["xw"], ["s"], keepdims=0),
                helper.make_node("Add", ["z", "s"], ["h0"]),
            ]
        for i in range(slow_ops):
            nodes.append(helper.make_node("MatMul", [f"h{i}", "eye"], [f"h{i + 1}"]))
        nodes += [
            helper.make_node(
                "ReduceMax", [f"h{slow_ops}"], ["m"], axes=[1] if per_row else None, keepdims=1 if per_row else 0
            ),
            helper.make_node("Sub", ["m", "m"], ["zero"]),
            helper.make_node("Add", ["y0", "zero"], ["y1"]),
        ]
        last = "y1"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    graph = helper.make_graph(
        nodes,
        "lin",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def publish(
    root: Path,
    name: str,
    version: int | None = None,
    *,
    bias: float | None = None,
    kind: str = "ok",
    slow_ops: int = 0,
    slow_dim: int = 512,
    per_row: bool = False,
) -> Path:
    """Publish one version atomically (``Repository.staging``) and return its folder.

    ``kind``: "ok"; "checksum" (fwx.json records a wrong sha256); "truncated" (half an
    ONNX file, correct sha256); "tflite_crash" (the 8-byte crashing .tflite, correct sha256).
    """
    repo = Repository(root)
    with repo.staging(name, version) as st:
        v = st.version or repo.next_version(name)
        fmt, fname = ("tflite", "model.tflite") if kind == "tflite_crash" else ("onnx", "model.onnx")
        data = onnx_bytes(float(v if bias is None else bias), slow_ops=slow_ops, slow_dim=slow_dim, per_row=per_row)
        if kind == "truncated":
            data = data[: len(data) // 2]
        elif kind == "tflite_crash":
            data = CRASHING_TFLITE
        (st.path / fname).write_bytes(data)
        sha = sha256_path(st.path / fname)
        if kind == "checksum":
            sha = "0" * 64
        entry = ArtifactEntry(format=fmt, path=fname, sha256=sha, size_bytes=len(data), signature=SIG.to_json())
        manifest = Manifest(
            name=name,
            version=v,
            source=SourceInfo("mem", "0" * 64, "onnx", "onnx"),
            signature=SIG.to_json(),
            artifacts={fmt: entry},
        )
        return st.publish(manifest)


# ------------------------------------------------------------------ a real server
def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """``fwx serve`` in a subprocess on free ports; output goes to ``log_path``."""

    def __init__(self, repo: Path, log_path: Path, *args: str, grpc: bool = False) -> None:
        import subprocess
        import sys

        self.http_port = free_port()
        self.grpc_port = free_port() if grpc else -1
        cmd = [
            sys.executable,
            "-m",
            "fwx",
            "serve",
            str(repo),
            "--http-port",
            str(self.http_port),
            "--grpc-port",
            str(self.grpc_port),
            *args,
        ]
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 60.0) -> None:
        import time

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"fwx serve exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            try:
                if Client(self.http_port, timeout=1.0).get("/v2/health/ready")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"fwx serve not ready after {timeout}s:\n{self.log()[-3000:]}")

    def stop(self, timeout: float = 30.0) -> int:
        import signal
        import subprocess

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return int(self.proc.returncode)


class Client:
    """A keep-alive KServe v2 REST client on the standard library (one per thread)."""

    def __init__(self, port: int, timeout: float = 30.0) -> None:
        import http.client

        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)

    def get(self, path: str) -> tuple[int, bytes]:
        self.conn.request("GET", path)
        resp = self.conn.getresponse()
        return resp.status, resp.read()

    def post(self, path: str, body: dict[str, object], headers: dict[str, str] | None = None) -> tuple[int, dict]:
        import json

        data = json.dumps(body).encode()
        self.conn.request("POST", path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        resp = self.conn.getresponse()
        raw = resp.read()
        try:
            return resp.status, json.loads(raw) if raw else {}
        except ValueError:
            return resp.status, {"raw": raw.decode(errors="replace")}

    def infer(self, x: float, model: str = "lin", version: str | None = None) -> tuple[int, dict]:
        """POST one ``x`` to the model; the answer's ``y`` is ``2x + version``."""
        path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
        body = {"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [x]}]}
        return self.post(path, body)

    def close(self) -> None:
        self.conn.close()

    def __del__(self) -> None:
        # most callers use a Client for one request (`Client(port).get(...)`): its socket closes with it,
        # not whenever the garbage collector gets to it (a ResourceWarning in some later test)
        self.conn.close()


def y_of(answer: dict) -> float:
    return float(next(o for o in answer["outputs"] if o["name"] == "y")["data"][0])


def count_polls(mm: Any) -> Callable[[], int]:
    """A counter of the repository scans ``mm`` has finished: "several polls later" is an event, not a pause."""
    done = [0]
    scan = mm._reconcile_all

    async def counted() -> None:
        await scan()
        done[0] += 1

    mm._reconcile_all = counted
    return lambda: done[0]
