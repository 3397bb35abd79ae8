"""Conv, pooling, normalisation, MatMul/Gemm, Softmax and reductions against onnxruntime."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx_torch_helpers import check_model, node_model, rand

X = rand(2, 4, 9, 8)
X_OTHER = rand(3, 4, 12, 11, seed=5)
DYN = {"x": ["n", 4, "h", "w"]}


@pytest.mark.parametrize(
    "attrs",
    [
        {"pads": [1, 1, 1, 1]},
        {"pads": [0, 1, 2, 1], "strides": [2, 1]},
        {"group": 2, "dilations": [2, 1], "pads": [2, 1, 2, 1]},
        {"group": 4, "strides": [2, 2], "auto_pad": "SAME_UPPER"},
        {"auto_pad": "SAME_LOWER", "strides": [2, 3]},
        {"auto_pad": "SAME_UPPER"},
        {"auto_pad": "VALID", "strides": [2, 2]},
    ],
)
def test_conv2d(attrs: dict[str, Any]) -> None:
    group = attrs.get("group", 1)
    w, b = rand(6 if group != 4 else 4, 4 // group, 3, 3, seed=1), rand(6 if group != 4 else 4, seed=2)
    model = node_model("Conv", {"x": X}, consts={"w": w, "b": b}, dims=DYN, kernel_shape=[3, 3], **attrs)
    check_model(model, {"x": X}, others=[{"x": X_OTHER}])


def test_conv1d_no_bias_and_conv_transpose() -> None:
    x = rand(2, 3, 10)
    check_model(node_model("Conv", {"x": x}, consts={"w": rand(5, 3, 4, seed=3)}, pads=[1, 2]), {"x": x})
    w = rand(4, 3, 3, 3, seed=4)
    model = node_model(
        "ConvTranspose",
        {"x": X},
        consts={"w": w, "b": rand(3, seed=5)},
        strides=[2, 2],
        pads=[1, 1, 1, 1],
        output_padding=[1, 0],
    )
    check_model(model, {"x": X})


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
        {"kernel_shape": [3, 2], "pads": [0, 1, 2, 0]},
        {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
        {"kernel_shape": [3, 3], "dilations": [2, 1]},
    ],
)
def test_max_pool(attrs: dict[str, Any]) -> None:
    check_model(node_model("MaxPool", {"x": X}, dims=DYN, **attrs), {"x": X}, others=[{"x": X_OTHER}])


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
        {"kernel_shape": [3, 2], "pads": [0, 1, 2, 0], "strides": [2, 1]},
        {"kernel_shape": [3, 2], "pads": [0, 1, 2, 0], "count_include_pad": 1},
        {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
        {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
    ],
)
def test_average_pool(attrs: dict[str, Any]) -> None:
    check_model(node_model("AveragePool", {"x": X}, dims=DYN, **attrs), {"x": X}, others=[{"x": X_OTHER}])


@pytest.mark.parametrize("op_type", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool(op_type: str) -> None:
    check_model(node_model(op_type, {"x": X}, dims=DYN), {"x": X}, others=[{"x": X_OTHER}])


def test_batch_and_instance_norm() -> None:
    consts = {"s": rand(4, seed=1), "b": rand(4, seed=2), "m": rand(4, seed=3), "v": np.abs(rand(4, seed=4)) + 0.5}
    check_model(node_model("BatchNormalization", {"x": X}, consts=consts, epsilon=1e-3), {"x": X})
    consts = {"s": rand(4, seed=1), "b": rand(4, seed=2)}
    check_model(node_model("InstanceNormalization", {"x": X}, consts=consts), {"x": X})


@pytest.mark.parametrize(("axis", "scale_shape"), [(-1, (8,)), (-2, (9, 8)), (2, (1, 8)), (-1, None)])
def test_layer_norm(axis: int, scale_shape: tuple[int, ...] | None) -> None:
    consts = {} if scale_shape is None else {"s": rand(*scale_shape, seed=1), "b": rand(*scale_shape, seed=2)}
    order = ["x", *consts] if consts else ["x", "s"]
    if scale_shape is None:
        consts = {"s": np.ones(8, np.float32) * 1.5}
    check_model(node_model("LayerNormalization", {"x": X}, consts=consts, input_order=order, axis=axis), {"x": X})


@pytest.mark.parametrize(
    ("a", "b"), [((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (2, 4, 3)), ((2, 3, 4), (4,))]
)
def test_matmul_broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    feeds = {"a": rand(*a), "b": rand(*b, seed=1)}
    check_model(node_model("MatMul", feeds), feeds)


@pytest.mark.parametrize(
    "attrs", [{}, {"transB": 1}, {"transA": 1, "alpha": 0.5, "beta": 2.0}, {"transB": 1, "beta": 0.0}]
)
def test_gemm(attrs: dict[str, Any]) -> None:
    a = rand(4, 3) if attrs.get("transA") else rand(3, 4)
    w = rand(5, 4, seed=1) if attrs.get("transB") else rand(4, 5, seed=1)
    c = rand(5, seed=2) if attrs.get("transB") else rand(3, 1, seed=2)
    check_model(node_model("Gemm", {"a": a}, consts={"w": w, "c": c}, **attrs), {"a": a})


@pytest.mark.parametrize(
    ("op_type", "axis", "opset"),
    [("Softmax", 1, 11), ("Softmax", -2, 13), ("LogSoftmax", 2, 11), ("LogSoftmax", -1, 13), ("Softmax", -1, 11)],
)
def test_softmax(op_type: str, axis: int, opset: int) -> None:
    check_model(node_model(op_type, {"x": X}, opset=opset, axis=axis), {"x": X})


REDUCE = [
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSumExp",
    "ReduceSumSquare",
    "ReduceLogSum",
]


@pytest.mark.parametrize("op_type", REDUCE)
def test_reduce_attr_form(op_type: str) -> None:
    x = np.abs(X) * 0.2 + 0.8  # ReduceProd over everything stays finite
    check_model(
        node_model(op_type, {"x": x}, opset=13 if op_type != "ReduceSum" else 11, axes=[-1, 1], keepdims=0), {"x": x}
    )


@pytest.mark.parametrize("op_type", REDUCE)
def test_reduce_input_form_opset18(op_type: str) -> None:
    x = np.abs(X) * 0.2 + 0.8  # ReduceProd over everything stays finite
    check_model(node_model(op_type, {"x": x}, consts={"a": np.array([-2], np.int64)}, opset=18), {"x": x})
    check_model(node_model(op_type, {"x": x}, opset=18, keepdims=0), {"x": x})


def test_reduce_noop_with_empty_axes() -> None:
    check_model(node_model("ReduceSum", {"x": X}, opset=13, noop_with_empty_axes=1), {"x": X})


@pytest.mark.parametrize("attrs", [{"axis": 1}, {"axis": -1, "keepdims": 0}, {"axis": 2, "select_last_index": 1}])
@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
def test_arg(op_type: str, attrs: dict[str, Any]) -> None:
    x = np.round(X * 2).astype(np.float32)  # ties, so select_last_index matters
    check_model(node_model(op_type, {"x": x}, opset=13, **attrs), {"x": x})


@pytest.mark.parametrize(
    ("attrs", "opset"),
    [
        ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, 13),
        ({"mode": "nearest", "coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_ceil"}, 18),
        ({"mode": "linear", "coordinate_transformation_mode": "half_pixel"}, 13),
        ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, 11),
        ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, 13),
        ({"mode": "cubic", "coordinate_transformation_mode": "half_pixel"}, 13),
    ],
)
def test_resize_scales(attrs: dict[str, Any], opset: int) -> None:
    consts = {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 2, 1.5], np.float32)}
    check_model(
        node_model("Resize", {"x": X}, consts=consts, opset=opset, dims=DYN, **attrs), {"x": X}, others=[{"x": X_OTHER}]
    )


def test_resize_sizes_from_shape_and_opset10_upsample() -> None:
    from onnx import helper

    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Mul", ["s", "k"], ["sz"]),
        helper.make_node(
            "Resize",
            ["x", "", "", "sz"],
            ["y"],
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),
    ]
    from onnx_torch_helpers import graph_model

    model = graph_model(nodes, {"x": X}, consts={"k": np.array([1, 1, 2, 3], np.int64)}, dims=DYN, opset=13)
    gm = check_model(model, {"x": X}, others=[{"x": X_OTHER}])
    assert "x.size(2)" in gm.code
    check_model(node_model("Resize", {"x": X}, consts={"s": np.array([1, 1, 2, 2], np.float32)}, opset=10), {"x": X})
    check_model(node_model("Upsample", {"x": X}, consts={"s": np.array([1, 1, 3, 2], np.float32)}, opset=9), {"x": X})


def test_resize_modes_torch_cannot_match_are_listed() -> None:
    from fwx.converters.onnx_torch.translate import unsupported_ops

    model = node_model(
        "Resize",
        {"x": X},
        consts={"roi": np.zeros(0, np.float32), "s": np.ones(4, np.float32)},
        opset=13,
        mode="linear",
        coordinate_transformation_mode="asymmetric",
    )
    assert unsupported_ops(model) == ["Resize(linear asymmetric)"]


@pytest.mark.parametrize(
    ("op_type", "attrs", "channels"),
    [("DepthToSpace", {"mode": "DCR"}, 8), ("DepthToSpace", {"mode": "CRD"}, 8), ("SpaceToDepth", {}, 2)],
    ids=["DepthToSpace-DCR", "DepthToSpace-CRD", "SpaceToDepth"],
)
def test_depth_and_space(op_type: str, attrs: dict[str, Any], channels: int) -> None:
    """``nn.PixelShuffle``/``PixelUnshuffle`` (super-resolution models), at two batch and spatial sizes."""
    x, other = rand(2, channels, 4, 6), rand(3, channels, 6, 2)
    dims = {"x": ["n", channels, "h", "w"]}
    check_model(node_model(op_type, {"x": x}, dims=dims, blocksize=2, **attrs), {"x": x}, others=[{"x": other}])
