"""The image's exact entrypoint serves a repository: run it outside a container (CI has no Docker engine)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from fwx.manifest import ArtifactEntry, Manifest, SourceInfo, sha256_path, size_of
from fwx.repository import Repository

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _linear_repo(root: Path) -> Path:
    """ONNX y = 2x + 1 with a dynamic batch, published the way fwx export does."""
    import onnx
    from onnx import TensorProto, helper

    w = helper.make_tensor("w", TensorProto.FLOAT, [1, 1], [2.0])
    b = helper.make_tensor("b", TensorProto.FLOAT, [1], [1.0])
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"])],
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1])],
        [w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    sig = {
        "inputs": [{"name": "x", "dtype": "float32", "shape": ["N", 1]}],
        "outputs": [{"name": "y", "dtype": "float32", "shape": ["N", 1]}],
    }
    repo = Repository(root)
    with repo.staging("linear") as st:
        path = st.path / "model.onnx"
        onnx.save(model, path)
        man = Manifest(
            name="linear", version=0, source=SourceInfo("linear.onnx", "0" * 64, "onnx", "onnx"), signature=sig
        )
        man.artifacts["onnx"] = ArtifactEntry(
            "onnx", "model.onnx", sha256_path(path), size_of(path), opset=13, signature=sig
        )
        st.publish(man)
    return root


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return int(r.status)
    except Exception:
        return 0


def test_entrypoint_serves_the_repository(tmp_path: Path) -> None:
    repo = _linear_repo(tmp_path / "models")
    http, grpc = _free_port(), _free_port()
    env = dict(
        os.environ,
        FWX_MODEL_REPOSITORY=str(repo),
        FWX_HOST="127.0.0.1",
        FWX_HTTP_PORT=str(http),
        FWX_GRPC_PORT=str(grpc),
        FWX_PYTHON=sys.executable,
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    proc = subprocess.Popen(
        ["sh", str(ROOT / "docker" / "entrypoint.sh"), "--poll-seconds", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while _get(f"http://127.0.0.1:{http}/v2/health/ready") != 200:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "server never became ready"
            time.sleep(0.3)
        hc = subprocess.run(["sh", str(ROOT / "docker" / "entrypoint.sh"), "healthcheck"], env=env)
        assert hc.returncode == 0
        body = json.dumps({"inputs": [{"name": "x", "shape": [2, 1], "datatype": "FP32", "data": [4.0, 0.5]}]})
        req = urllib.request.Request(
            f"http://127.0.0.1:{http}/v2/models/linear/infer",
            data=body.encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            out = json.loads(r.read())
        np.testing.assert_allclose(out["outputs"][0]["data"], [9.0, 2.0])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
    assert proc.returncode == 0
