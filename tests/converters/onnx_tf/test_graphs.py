"""Multi-node graphs: shape-chain folding, channels-last propagation, GELU fusion, the erf approximation."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from fwx.converters.onnx_tf.translate import translate  # noqa: E402

_rng = np.random.default_rng(3)


def model(
    nodes: list[Any], inputs: list[Any], outputs: list[str], inits: dict[str, np.ndarray], opset: int = 17
) -> Any:
    graph = helper.make_graph(
        nodes,
        "g",
        inputs,
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m, strict_mode=True)


def assert_matches(m: Any, feeds: dict[str, np.ndarray]) -> Any:
    tr = translate(m)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for o, ref in zip(sess.get_outputs(), sess.run(None, feeds), strict=True):
        np.testing.assert_allclose(tr(feeds)[o.name], ref, atol=1e-4, rtol=1e-3)
    return tr


def op_types(tr: Any) -> list[str]:
    """Op types of the traced function, including the bodies it calls."""
    graph = tr.function.graph.as_graph_def()
    ops = [n.op for n in graph.node]
    for fn in graph.library.function:
        ops += [n.op for n in fn.node_def]
    return ops


def test_shape_chain_folds_static_dims_and_keeps_batch_dynamic() -> None:
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as the legacy exporter writes attention reshapes."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["s", "i2"], ["c"], axis=0),
        helper.make_node("Unsqueeze", ["b", "ax"], ["b1"]),
        helper.make_node("Unsqueeze", ["c", "ax"], ["c1"]),
        helper.make_node("Div", ["c1", "two"], ["half"]),
        helper.make_node("Concat", ["b1", "minus1", "two", "half"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = {
        "i0": np.array(0, np.int64),
        "i2": np.array(2, np.int64),
        "ax": np.array([0], np.int64),
        "two": np.array([2], np.int64),
        "minus1": np.array([-1], np.int64),
    }
    m = model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "S", 8])], ["y"], inits)
    tr = None
    for batch, seq in ((1, 3), (4, 5)):
        tr = assert_matches(m, {"x": _rng.standard_normal((batch, seq, 8)).astype(np.float32)})
    assert tr is not None
    out = tr.function.structured_outputs["y"]
    assert out.shape.as_list() == [None, None, 2, 4]  # batch stays dynamic, the folded dims are static


def _cnn() -> Any:
    w1, w2 = (
        _rng.standard_normal((8, 3, 3, 3)).astype(np.float32),
        _rng.standard_normal((8, 8, 3, 3)).astype(np.float32),
    )
    bn = [_rng.uniform(0.5, 1.5, 8).astype(np.float32) for _ in range(4)]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["a", "s", "b", "m", "v"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "r"], ["sum"]),
        helper.make_node("Mul", ["sum", "scale"], ["scaled"]),
        helper.make_node("MaxPool", ["scaled"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Transpose", ["p"], ["nhwc"], perm=[0, 2, 3, 1]),
        helper.make_node("GlobalAveragePool", ["p"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"]),
    ]
    inits = {
        "w1": w1,
        "w2": w2,
        "s": bn[0],
        "b": bn[1],
        "m": bn[2],
        "v": bn[3],
        "scale": _rng.standard_normal((8, 1, 1)).astype(np.float32),
    }
    return model(
        nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 12, 12])], ["nhwc", "flat"], inits
    )


def test_channels_last_chain_transposes_once() -> None:
    """Conv/BN/Relu/Add/Mul/MaxPool stay NHWC; a trailing NCHW->NHWC Transpose costs nothing."""
    m = _cnn()
    tr = assert_matches(m, {"x": _rng.standard_normal((2, 3, 12, 12)).astype(np.float32)})
    assert op_types(tr).count("Transpose") == 1  # only the entry NCHW -> NHWC


def test_nhwc_layout_needs_no_transpose_at_all() -> None:
    m = _cnn()
    tr = translate(m, layout="nhwc")
    assert tr.layout == "nhwc"
    assert tr.signature.inputs[0].shape == ("N", 12, 12, 3)
    x = _rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
    ref = ort.InferenceSession(m.SerializeToString()).run(["nhwc"], {"x": x})[0]
    np.testing.assert_allclose(tr({"x": x.transpose(0, 2, 3, 1)})["nhwc"], ref, atol=1e-4, rtol=1e-3)
    assert "Transpose" not in op_types(tr)


def test_exact_gelu_pattern_becomes_one_gelu() -> None:
    nodes = [
        helper.make_node("Div", ["x", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]),
        helper.make_node("Mul", ["x", "a"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["y"]),
    ]
    inits = {
        "sqrt2": np.array(math.sqrt(2), np.float32),
        "one": np.array(1.0, np.float32),
        "half": np.array(0.5, np.float32),
    }
    m = model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])], ["y"], inits)
    tr = assert_matches(m, {"x": _rng.uniform(-5, 5, (4, 6)).astype(np.float32)})
    assert any("GELU" in n for n in tr.notes)
    assert "Erf" not in op_types(tr)


def test_erf_approximation_is_float32_accurate() -> None:
    from fwx.converters.onnx_tf.ops_elementwise import erf

    x = np.linspace(-6, 6, 20001, dtype=np.float32)
    want = np.array([math.erf(float(v)) for v in x])
    ours = np.abs(erf(tf.constant(x)).numpy() - want).max()
    assert ours < 5e-7  # a few float32 ulps; TF's own kernel: see below
    assert ours <= 4 * max(np.abs(tf.math.erf(x).numpy() - want).max(), 1e-7)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_batch_major_rnn_layout_matches_time_major(op: str) -> None:
    """layout=1 (onnxruntime refuses it) must equal layout=0 on transposed inputs."""
    b, t, i, h, gates = 3, 5, 4, 6, (4 if op == "LSTM" else 3)
    weights = {
        "W": _rng.uniform(-0.5, 0.5, (2, gates * h, i)).astype(np.float32),
        "R": _rng.uniform(-0.5, 0.5, (2, gates * h, h)).astype(np.float32),
        "B": _rng.uniform(-0.5, 0.5, (2, 2 * gates * h)).astype(np.float32),
    }
    outs = ["y", "yh"]

    def rnn(layout: int, x_shape: list[Any], h_shape: list[Any]) -> Any:
        node = helper.make_node(
            op, ["x", "W", "R", "B", "", "h0"], outs, hidden_size=h, layout=layout, direction="bidirectional"
        )
        return model(
            [node],
            [
                helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape),
                helper.make_tensor_value_info("h0", TensorProto.FLOAT, h_shape),
            ],
            outs,
            weights,
            14,
        )

    x = _rng.standard_normal((b, t, i)).astype(np.float32)
    h0 = _rng.standard_normal((b, 2, h)).astype(np.float32)
    got = translate(rnn(1, ["N", "T", i], ["N", 2, h]))({"x": x, "h0": h0})
    ref_model = rnn(0, ["T", "N", i], [2, "N", h])
    y, yh = ort.InferenceSession(ref_model.SerializeToString()).run(
        None, {"x": x.transpose(1, 0, 2), "h0": h0.transpose(1, 0, 2)}
    )
    np.testing.assert_allclose(got["y"], y.transpose(2, 0, 1, 3), atol=1e-4, rtol=1e-3)
    np.testing.assert_allclose(got["yh"], yh.transpose(1, 0, 2), atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize(
    ("attrs", "scales"),
    [
        ({"mode": "linear", "coordinate_transformation_mode": "half_pixel"}, [0.5, 0.5]),
        ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, [0.5, 1.5]),
        ({"mode": "linear", "coordinate_transformation_mode": "asymmetric"}, [0.75, 0.5]),
        ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, [0.5, 0.5]),
    ],
)
def test_resize_by_scales_on_dynamic_sizes_uses_onnx_mapping(attrs: dict[str, str], scales: list[float]) -> None:
    """``F.interpolate(scale_factor=0.5)`` on a dynamic height (a U-Net) is Resize with scales: at an odd
    height ``in * scale`` is not whole and TF's out/in mapping would differ, so the translator samples
    with ONNX's own mapping; checked at even and odd sizes against onnxruntime."""
    sc = np.array([1, 1, *scales], np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2, "h", "w"])
    m = model([helper.make_node("Resize", ["x", "", "sc"], ["y"], **attrs)], [x], ["y"], {"sc": sc})
    for h, w in ((8, 10), (9, 7), (5, 13)):
        assert_matches(m, {"x": _rng.standard_normal((1, 2, h, w)).astype(np.float32)})


def _if_model() -> Any:
    """``if x.sum() > 0: relu(x) * 2 else: -x + y`` (the else branch reads ``y`` from the outer scope), then an
    ``If`` on a condition known at conversion (the batch is not 0): what a scripted TorchScript exports."""
    f32 = TensorProto.FLOAT
    then_g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "two"], ["t_out"])],
        "then",
        [],
        [helper.make_tensor_value_info("t_out", f32, None)],
        initializer=[numpy_helper.from_array(np.array(2.0, np.float32), "two")],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["neg"]), helper.make_node("Add", ["neg", "y"], ["e_out"])],
        "else",
        [],
        [helper.make_tensor_value_info("e_out", f32, None)],
    )
    keep = helper.make_graph(
        [helper.make_node("Identity", ["z"], ["k_out"])],
        "keep",
        [],
        [helper.make_tensor_value_info("k_out", f32, None)],
    )
    drop = helper.make_graph(
        [helper.make_node("Neg", ["z"], ["d_out"])], "drop", [], [helper.make_tensor_value_info("d_out", f32, None)]
    )
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["z"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "axis0"], ["n"]),
        helper.make_node("Greater", ["n", "none"], ["known"]),
        helper.make_node("If", ["known"], ["out"], then_branch=keep, else_branch=drop),
    ]
    inputs = [
        helper.make_tensor_value_info("x", f32, [3, 4]),
        helper.make_tensor_value_info("y", f32, [3, 4]),
    ]
    inits = {"zero": np.array(0.0, np.float32), "axis0": np.array(0, np.int64), "none": np.array(0, np.int64)}
    return model(nodes, inputs, ["out"], inits)


def test_if_runs_the_branch_the_condition_picks_and_inlines_a_known_one() -> None:
    m = _if_model()
    y = _rng.standard_normal((3, 4)).astype(np.float32)
    for x in (
        np.abs(_rng.standard_normal((3, 4))).astype(np.float32),
        -np.abs(_rng.standard_normal((3, 4))).astype(np.float32),
    ):
        tr = assert_matches(m, {"x": x, "y": y})
    ops = op_types(tr)
    assert ops.count("If") + ops.count("StatelessIf") == 1  # the known condition ran its branch inline


@pytest.mark.slow
def test_if_converts_to_tflite_builtins() -> None:
    from .opcheck import _run_tflite

    m = _if_model()
    tr = translate(m)
    y = _rng.standard_normal((3, 4)).astype(np.float32)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for x in (np.abs(y), -np.abs(y)):
        got = _run_tflite(tr, {"x": x, "y": y})
        np.testing.assert_allclose(next(iter(got.values())), sess.run(None, {"x": x, "y": y})[0], atol=1e-6)
