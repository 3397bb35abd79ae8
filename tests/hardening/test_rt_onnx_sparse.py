"""A sparse initializer's external data is held to the loose-file rule like any other tensor's.

onnx's own tensor walk (``_get_all_tensors``) skips sparse tensors, but
onnxruntime reads their ``values`` and ``indices`` from the files they name.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fwx.errors import InputError
from fwx.safety import snapshot

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

VALUES = np.array([1.0, 2.0, 3.0, 4.0], np.float32)


def _sparse_model(folder: Path, location: str) -> Path:
    """y = x + w, where w is a sparse initializer whose 16 value bytes live in ``location``."""
    values = numpy_helper.from_array(VALUES, "w")
    values.ClearField("raw_data")
    values.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "16")):
        entry = values.external_data.add()
        entry.key, entry.value = key, value
    sparse = helper.make_sparse_tensor(values, numpy_helper.from_array(np.arange(4, dtype=np.int64), "i"), [1, 4])
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        sparse_initializer=[sparse],
    )
    path = folder / "m.onnx"
    path.write_bytes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    )
    return path


def test_a_sparse_tensor_cannot_name_a_neighbour_it_does_not_fill(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_bytes(b"TOPSECRET" * 8)
    with pytest.raises(InputError, match="'notes.txt' holds bytes 16..72 that no tensor names") as info:
        snapshot.take(_sparse_model(home, "notes.txt"), parent=tmp_path)
    assert len(str(info.value).splitlines()) == 1


def test_a_sparse_tensors_own_data_file_is_copied_and_runs(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    home = tmp_path / "home"
    home.mkdir()
    (home / "m.onnx.data").write_bytes(VALUES.tobytes())
    snap = snapshot.take(_sparse_model(home, "m.onnx.data"), parent=tmp_path)
    assert snap.companions == ("m.onnx.data",)
    session = ort.InferenceSession(str(snap.path), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": np.zeros((1, 4), np.float32)})
    np.testing.assert_array_equal(y, VALUES.reshape(1, 4))
