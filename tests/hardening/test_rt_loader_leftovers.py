"""A command's loader leaves nothing in the temp folder: not its snapshots (copies of the model), not its scratch.

Once Landlock is on, the loader may not remove entries of the shared temp folder, so its own clean-up
at exit could not delete them: every run left a private copy of the model behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402


def _onnx(path: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    path.write_bytes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    )
    return path


def _fwx(tmpdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    return subprocess.run(
        [sys.executable, "-m", "fwx", *args], capture_output=True, text=True, env=env, check=False, timeout=600
    )


def test_inspect_export_and_a_refusal_leave_the_temp_folder_as_they_found_it(tmp_path: Path) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    model = _onnx(tmp_path / "m.onnx")
    garbage = tmp_path / "bad.onnx"
    garbage.write_bytes(b"\x08\x07\x12\xff\xff\xff\xff\x0f" + b"A" * 32)
    runs = [
        ("inspect", str(model)),
        ("export", str(model), "--to", "onnx", "--out", str(tmp_path / "out")),
        ("inspect", str(garbage)),
    ]
    for args in runs:
        proc = _fwx(tmpdir, *args)
        assert "walls: landlock" in proc.stdout + proc.stderr or proc.returncode != 0, proc.stderr
        assert (proc.returncode == 0) == (args[1] != str(garbage)), proc.stderr
        assert sorted(p.name for p in tmpdir.iterdir()) == [], f"fwx {args[0]} left {list(tmpdir.rglob('*'))}"
    assert (tmp_path / "out" / "m" / "1" / "model.onnx").is_file()
