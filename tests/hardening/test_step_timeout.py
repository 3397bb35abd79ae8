"""A model that never finishes is one error line, not a hang: ``--step-timeout`` bounds every step.

The file is an ONNX ``Loop`` of 2**62 iterations; fwx runs it as the
reference while pinning the signature. The real command line runs in its own
process (only a command process may end itself), so the limit can be proven.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _endless(path: Path) -> Path:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    vin = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Add", ["v_in", "one"], ["v_out"])],
        "body",
        [vin("i", TensorProto.INT64, []), vin("c_in", TensorProto.BOOL, []), vin("v_in", TensorProto.FLOAT, [None, 2])],
        [vin("c_out", TensorProto.BOOL, []), vin("v_out", TensorProto.FLOAT, [None, 2])],
        [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "c", "x"], ["y"], body=body)],
        "endless",
        [vin("x", TensorProto.FLOAT, ["N", 2])],
        [vin("y", TensorProto.FLOAT, ["N", 2])],
        [
            helper.make_tensor("M", TensorProto.INT64, [], [2**62]),
            helper.make_tensor("c", TensorProto.BOOL, [], [True]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(path))
    return path


@pytest.mark.slow
def test_an_endless_loop_is_one_error_line(tmp_path: Path) -> None:
    model = _endless(tmp_path / "endless.onnx")
    out = tmp_path / "artifacts"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "fwx", "export", str(model), "--to", "onnx", "--out", str(out), "--step-timeout", "3"]
    proc = subprocess.run([*cmd, "--json"], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 1, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert "did not finish within 3s" in errors[0]
    assert "Traceback" not in proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["ok"] is False
    folder = out / "endless"
    published = [p for p in folder.iterdir() if not p.name.startswith(".")] if folder.exists() else []
    assert published == []  # nothing published; a hidden temporary folder at most, swept by the next export
