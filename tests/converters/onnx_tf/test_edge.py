"""The ``OnnxToSavedModel`` edge: precheck, options, names, errors, the planner, import weight."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fwx.converters.base import ConvertOptions, SourceModel
from fwx.errors import ExportError, UnsupportedOpsError
from fwx.formats import Format
from fwx.signature import Signature

onnx = pytest.importorskip("onnx")
tf = pytest.importorskip("tensorflow")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from fwx.converters.onnx2savedmodel import OnnxToSavedModel  # noqa: E402
from fwx.sources.readers import onnx_signature  # noqa: E402


def write(
    tmp_path: Path,
    nodes: list[Any],
    inputs: list[Any],
    outputs: list[Any],
    inits: dict[str, np.ndarray] | None = None,
    name: str = "m.onnx",
) -> Path:
    graph = helper.make_graph(
        nodes, "g", inputs, outputs, initializer=[numpy_helper.from_array(v, k) for k, v in (inits or {}).items()]
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    path = tmp_path / name
    onnx.save(m, str(path))
    return path


def source(path: Path) -> SourceModel:
    return SourceModel(Format.ONNX, path, onnx_signature(path)[0])


def linear(tmp_path: Path, in_name: str = "x", out_name: str = "y", units: int = 4) -> Path:
    """y = x @ W + 1 with W = 2 * I: turns 4 into 9."""
    w = 2 * np.eye(units, dtype=np.float32)
    return write(
        tmp_path,
        [helper.make_node("MatMul", [in_name, "w"], ["mm"]), helper.make_node("Add", ["mm", "one"], [out_name])],
        [helper.make_tensor_value_info(in_name, TensorProto.FLOAT, ["batch", units])],
        [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, ["batch", units])],
        {"w": w, "one": np.ones(units, np.float32)},
    )


def test_precheck_lists_every_unsupported_op_at_once(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    path = write(
        tmp_path,
        [
            helper.make_node("Relu", ["x"], ["a"]),
            helper.make_node("Hardmax", ["a"], ["b"], axis=-1),
            helper.make_node("Unique", ["a"], ["c"]),
            helper.make_node("FusedGemm", ["a", "a"], ["y"], domain="com.microsoft"),
        ],
        [x],
        [y],
    )
    with pytest.raises(UnsupportedOpsError) as info:
        OnnxToSavedModel().precheck(source(path), ConvertOptions())
    assert info.value.ops == ["Hardmax", "Unique", "com.microsoft::FusedGemm"]
    assert info.value.hint
    with pytest.raises(UnsupportedOpsError):  # convert refuses the same way, before tracing anything
        OnnxToSavedModel().convert(source(path), tmp_path / "out", ConvertOptions())
    assert not (tmp_path / "out").exists()


def test_convert_result_and_readback(tmp_path: Path) -> None:
    path = linear(tmp_path, units=1200)  # big enough to be stored as a variable
    res = OnnxToSavedModel().convert(source(path), tmp_path / "sm", ConvertOptions())
    assert res.tool == "fwx-onnx-tf"
    assert res.tool_version.startswith("fwx ")
    assert tf.__version__ in res.tool_version
    assert res.signature == onnx_signature(path)[0]
    assert res.layout is None
    loaded = tf.saved_model.load(str(tmp_path / "sm"))
    # weight and bias (>= 1024 elements each) live in variables/, not in the graph proto
    assert sorted(v.shape.as_list() for v in loaded.weights_list) == [[1200], [1200, 1200]]
    fn = loaded.signatures["serving_default"]
    (spec,) = fn.structured_input_signature[1].values()
    assert spec.name == "x"
    assert spec.shape.as_list() == [None, 1200]
    x = np.full((3, 1200), 4.0, np.float32)
    np.testing.assert_array_equal(fn(x=tf.constant(x))["y"].numpy(), np.full((3, 1200), 9.0, np.float32))


def test_names_tf_refuses_are_renamed_and_recorded(tmp_path: Path) -> None:
    path = linear(tmp_path, in_name="input:0", out_name="logits:0")
    res = OnnxToSavedModel().convert(source(path), tmp_path / "sm", ConvertOptions())
    assert res.extra["input_names"] == {"input:0": "input_0"}
    assert res.signature.input_names == ["input_0"]
    assert res.signature.output_names == ["logits:0"]
    assert any("input:0 -> input_0" in n for n in res.notes)
    fn = tf.saved_model.load(str(tmp_path / "sm")).signatures["serving_default"]
    assert [s.name for s in fn.structured_input_signature[1].values()] == ["input_0"]
    out = fn(input_0=tf.constant(np.full((1, 4), 4.0, np.float32)))
    np.testing.assert_array_equal(out["logits:0"].numpy(), np.full((1, 4), 9.0, np.float32))


def _conv(tmp_path: Path) -> Path:
    w = np.random.default_rng(0).standard_normal((5, 3, 3, 3)).astype(np.float32)
    return write(
        tmp_path,
        [helper.make_node("Conv", ["img", "w"], ["f"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["f"], ["out"])],
        [helper.make_tensor_value_info("img", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 5, 8, 8])],
        {"w": w},
    )


def test_layout_nhwc_makes_4d_inputs_channels_last(tmp_path: Path) -> None:
    path = _conv(tmp_path)
    res = OnnxToSavedModel().convert(source(path), tmp_path / "sm", ConvertOptions(layout="nhwc"))
    assert res.layout == "nhwc"
    assert res.signature.inputs[0].shape == ("N", 8, 8, 3)
    assert res.signature.outputs[0].shape == ("N", 5, 8, 8)  # outputs keep the ONNX layout
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    ref = ort.InferenceSession(str(path)).run(None, {"img": x})[0]
    fn = tf.saved_model.load(str(tmp_path / "sm")).signatures["serving_default"]
    np.testing.assert_allclose(fn(img=tf.constant(x.transpose(0, 2, 3, 1)))["out"].numpy(), ref, atol=1e-4)


def test_unknown_layout_is_a_usage_error(tmp_path: Path) -> None:
    from fwx.errors import UsageError

    with pytest.raises(UsageError):
        OnnxToSavedModel().convert(source(_conv(tmp_path)), tmp_path / "sm", ConvertOptions(layout="nwhc"))


def test_static_shapes_pin_the_sample_shapes(tmp_path: Path) -> None:
    path = _conv(tmp_path)
    sample = np.zeros((2, 3, 8, 8), np.float32)
    src = replace(source(path), sample_inputs={"img": sample})
    res = OnnxToSavedModel().convert(src, tmp_path / "sm", ConvertOptions(static_shapes=True))
    assert res.signature.inputs[0].shape == (2, 3, 8, 8)
    assert res.signature.outputs[0].shape == (2, 5, 8, 8)
    conv = tf.lite.TFLiteConverter.from_saved_model(str(tmp_path / "sm"))
    from ai_edge_litert.interpreter import Interpreter

    detail = Interpreter(model_content=conv.convert()).get_input_details()[0]
    assert list(detail["shape_signature"]) == [2, 3, 8, 8]


def test_translation_failure_is_one_clear_export_error(tmp_path: Path) -> None:
    """Conv weights computed at run time cannot be laid out for TF: say which node and why."""
    path = write(
        tmp_path,
        [helper.make_node("Conv", ["x", "w"], ["y"])],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [3, 2, 3, 3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 3, 3])],
    )
    with pytest.raises(ExportError) as info:
        OnnxToSavedModel().convert(source(path), tmp_path / "sm", ConvertOptions())
    assert "Conv node" in info.value.message
    assert "constant weight" in info.value.message
    assert "\n" not in info.value.message
    assert info.value.hint


def test_missing_file_path_is_refused() -> None:
    src = SourceModel(Format.ONNX, None, Signature(()))
    with pytest.raises(ExportError):
        OnnxToSavedModel().precheck(src, ConvertOptions())


def test_planner_reaches_tflite_through_this_edge() -> None:
    from fwx.converters.plan import plans

    hops = [[h.module for h in p.hops] for p in plans(Format.ONNX, Format.TFLITE)]
    assert ["fwx.converters.onnx2savedmodel", "fwx.converters.savedmodel2tflite"] in hops
    assert any(
        "fwx.converters.onnx2savedmodel" in [h.module for h in p.hops]
        for p in plans(Format.PYTORCH, Format.TFLITE, include_unavailable=True)
    )


def test_edge_modules_import_no_framework() -> None:
    code = (
        "import sys, fwx.converters.onnx2savedmodel, fwx.converters.onnx_tf.model, "
        "fwx.converters.onnx_tf.table\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'tensorflow', 'onnx', 'torch', 'keras'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
