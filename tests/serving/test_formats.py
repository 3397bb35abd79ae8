"""Every export format serves through the shared runtimes; --prefer-model picks which one, metadata says so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fwx.formats import Format

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
FORMATS = ["torchscript", "pt2", "savedmodel", "onnx", "tflite"]
PLATFORMS = {
    "torchscript": "pytorch_libtorch",
    "pt2": "pytorch_pt2",
    "savedmodel": "tensorflow_savedmodel",
    "onnx": "onnxruntime_onnx",
    "tflite": "tflite",
}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, live_server: Any) -> Any:
    """`fwx export` a torch Linear(1,1) to every format once; serve each format under its own name."""
    work = tmp_path_factory.mktemp("formats")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fwx",
            "export",
            "torch_linear:build",
            "--input",
            "x:float32[N,1]",
            "--output",
            "y",
            "--to",
            "all",
            "--out",
            str(work / "exported"),
            "--name",
            "lin",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for fmt in FORMATS:
        shutil.copytree(work / "exported" / "lin", work / "repo" / f"lin_{fmt}")
    return live_server(
        work / "repo", load_probe=False, prefer_per_model={f"lin_{fmt}": [Format(fmt)] for fmt in FORMATS}
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_turns_4_into_9(srv: Any, fmt: str) -> None:
    body = {"inputs": [{"name": "x", "shape": [3, 1], "datatype": "FP32", "data": [4, 0, 1]}]}
    r = srv.request("POST", f"/v2/models/lin_{fmt}/infer", content=json.dumps(body))
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [9.0, 1.0, 3.0]
    meta = srv.request("GET", f"/v2/models/lin_{fmt}").json()
    assert meta["parameters"] == {"format": fmt}
    assert meta["platform"] == PLATFORMS[fmt]
    tf = srv.request("POST", f"/v1/models/lin_{fmt}:predict", content=json.dumps({"instances": [[4.0]]}))
    assert tf.json() == {"predictions": [[9.0]]}
