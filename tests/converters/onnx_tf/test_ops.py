"""Every translated op against onnxruntime on random inputs (broadcasting, negative axes, opset forms)."""

from __future__ import annotations

import numpy as np
import pytest

from .opcheck import Batch, Case

pytest.importorskip("tensorflow")
pytest.importorskip("onnxruntime")

_rng = np.random.default_rng(0)


def f(*shape: int, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
    return _rng.uniform(lo, hi, shape).astype(np.float32)


def i64(*vals: int) -> np.ndarray:
    return np.asarray(vals, np.int64)


def rt(name: str, v: np.ndarray) -> tuple[str, np.ndarray, bool]:
    return (name, v, False)


def k(name: str, v: np.ndarray) -> tuple[str, np.ndarray, bool]:
    return (name, v, True)


X = rt("x", f(3, 4, 5))
IDS = _rng.integers(-9, 9, (3, 4)).astype(np.int64)  # positions and ids: the int64 forms of the ops
IMG = rt("x", f(2, 4, 9, 9))
BOOL_A = rt("a", _rng.random((3, 4)) > 0.5)
BOOL_B = rt("b", _rng.random((4,)) > 0.5)

UNARY = [
    "Abs",
    "Neg",
    "Exp",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "Sin",
    "Cos",
    "Tan",
    "Tanh",
    "Sigmoid",
    "Relu",
    "Erf",
    "Softplus",
    "Softsign",
    "HardSwish",
    "Mish",
    "HardSigmoid",
    "LeakyRelu",
    "Elu",
    "Selu",
    "Identity",
]


def _cases() -> list[Case]:
    cs = [Case(op, [X], opset=18, id=op) for op in UNARY]
    cs += [
        Case("Log", [rt("x", f(3, 4, lo=0.1))]),
        Case("Sqrt", [rt("x", f(3, 4, lo=0.0))]),
        Case("Reciprocal", [rt("x", f(3, 4, lo=0.5))]),
        Case("Gelu", [X], opset=20, id="Gelu-exact"),
        Case("Gelu", [X], {"approximate": "tanh"}, opset=20, id="Gelu-tanh"),
        Case("IsNaN", [rt("x", np.array([[1.0, np.nan], [np.inf, 0.0]], np.float32))]),
        Case("IsInf", [rt("x", np.array([[1.0, -np.inf], [np.inf, 0.0]], np.float32))], {"detect_negative": 0}),
        Case("Not", [BOOL_A]),
        # T5's relative position buckets: |i - j| of int64 positions (TFLite's ABS has no int64 kernel)
        Case("Abs", [rt("x", i64(-7, 0, 12, -(2**40)))], id="Abs-int64"),
        Case("Sign", [rt("x", i64(-7, 0, 12, -(2**40)))], id="Sign-int64"),  # DeBERTa's log buckets
        Case("LeakyRelu", [X], {"alpha": 0.3}, id="LeakyRelu-alpha"),
        # Broadcasting binary ops, including a constant and a lower-rank operand.
        Case("Add", [X, rt("y", f(5))]),
        Case("Sub", [rt("x", f(3, 1, 5)), rt("y", f(4, 1))]),
        Case("Mul", [X, k("y", f(4, 1))]),
        Case("Div", [X, rt("y", f(3, 4, 5, lo=0.5))]),
        Case("Div", [rt("x", i64(7, -9, 12)), k("y", i64(2))], id="Div-int"),
        Case("Pow", [rt("x", f(3, 4, lo=0.1)), rt("y", f(4))]),
        Case("Pow", [X, k("y", np.array(2.0, np.float32))], id="Pow-2"),
        Case("Pow", [rt("x", f(3, 4, lo=0.1)), k("y", np.array(0.5, np.float32))], id="Pow-sqrt"),
        Case("Mod", [rt("x", i64(-7, 9, 12)), k("y", i64(5))], id="Mod-int"),
        Case("Mod", [X, k("y", np.array(0.7, np.float32))], {"fmod": 1}, id="Mod-fmod"),
        Case("Mod", [rt("x", i64(-7, 9, -12)), k("y", i64(5))], {"fmod": 1}, id="Mod-fmod-int"),
        Case("Equal", [rt("x", i64(1, 2, 3)), k("y", i64(2))]),
        Case("Less", [X, rt("y", f(5))]),
        Case("Greater", [X, rt("y", f(4, 1))]),
        Case("LessOrEqual", [X, k("y", f(5))]),
        Case("GreaterOrEqual", [X, k("y", f(1))]),
        Case("And", [BOOL_A, BOOL_B]),
        Case("Or", [BOOL_A, BOOL_B]),
        Case("Xor", [BOOL_A, BOOL_B]),
        Case("PRelu", [IMG, k("s", f(4, 1, 1))]),
        Case("Max", [X, rt("y", f(5)), k("z", f(4, 1))]),
        Case("Min", [X, rt("y", f(5))]),
        Case("Sum", [X, rt("y", f(5)), rt("z", f(3, 4, 5))]),
        Case("Mean", [X, rt("y", f(5))]),
        Case("Where", [rt("c", _rng.random((4, 5)) > 0.5), X, rt("y", f(5))]),
        Case("Clip", [X], {"min": -0.5, "max": 0.7}, opset=6, id="Clip-attrs"),
        Case("Clip", [X, k("lo", np.array(-0.5, np.float32)), k("hi", np.array(0.7, np.float32))], id="Clip-inputs"),
        Case("Clip", [X, k("lo", np.array(0.0, np.float32)), k("hi", np.array(6.0, np.float32))], id="Clip-relu6"),
        Case("Clip", [X, k("lo", np.array(-0.2, np.float32))], id="Clip-min-only"),
        Case("Clip", [X, rt("lo", np.array(-0.2, np.float32))], static=True, id="Clip-dynamic"),
        Case("Dropout", [X], opset=13),
    ]
    cs += _linalg_cases() + _nn_cases() + _shape_cases() + _index_cases() + _rnn_cases()
    return cs


def _linalg_cases() -> list[Case]:
    return [
        Case("MatMul", [X, k("w", f(5, 6))], id="MatMul-3d-2d"),
        Case("MatMul", [rt("x", f(4, 5)), rt("w", f(2, 5, 3))]),
        Case("MatMul", [rt("x", f(5)), k("w", f(5, 3))], id="MatMul-1d"),
        Case("MatMul", [rt("x", f(2, 3, 4, 5)), rt("w", f(2, 3, 5, 4))], id="MatMul-4d"),
        Case("Gemm", [rt("a", f(3, 5)), k("b", f(4, 5)), k("c", f(4))], {"transB": 1, "alpha": 0.5, "beta": 2.0}),
        Case(
            "Gemm",
            [rt("a", f(5, 3)), rt("b", f(5, 4)), rt("c", f(3, 4))],
            {"transA": 1, "alpha": 1.5},
            static=True,
            id="Gemm-dynamic-B",
        ),
        Case("Einsum", [rt("a", f(2, 3, 4)), rt("b", f(2, 4, 5))], {"equation": "bij,bjk->bik"}, opset=12),
        Case("Softmax", [X], {"axis": 1}, opset=11, id="Softmax-coerced"),
        Case("Softmax", [X], {"axis": 1}, opset=13),
        Case("LogSoftmax", [X], {"axis": -1}, opset=13),
        Case("ReduceMean", [X], {"axes": [-1], "keepdims": 0}, opset=17, id="ReduceMean-attr"),
        Case("ReduceMean", [X, k("axes", i64(1, 2))], opset=18, id="ReduceMean-input"),
        Case("ReduceSum", [X, k("axes", i64(-2))], opset=13),
        Case("ReduceSum", [X], opset=13, id="ReduceSum-all"),
        Case(
            "ReduceSum",
            [X, k("axes", np.zeros(0, np.int64))],
            {"noop_with_empty_axes": 1},
            opset=13,
            id="ReduceSum-noop",
        ),
        Case("ReduceMax", [X], {"axes": [0, 2]}, opset=13),
        Case("ReduceMax", [rt("x", IDS)], {"axes": [1]}, opset=13, id="ReduceMax-int64"),
        Case("ReduceMin", [rt("x", IDS)], {"axes": [1]}, opset=13, id="ReduceMin-int64"),
        Case("ReduceSum", [rt("x", IDS), k("axes", i64(1))], opset=13, id="ReduceSum-int64"),
        Case("ReduceProd", [rt("x", IDS)], {"axes": [1]}, opset=13, id="ReduceProd-int64"),
        Case("CumSum", [rt("x", IDS), k("axis", np.array(1, np.int64))], id="CumSum-int64"),
        Case("Clip", [rt("x", IDS), k("lo", np.array(0, np.int64)), k("hi", np.array(5, np.int64))], id="Clip-int64"),
        Case("Mul", [rt("x", IDS), k("y", i64(3))], id="Mul-int64"),
        Case("Max", [rt("x", IDS), k("y", i64(2))], id="Max-int64"),
        Case("ReduceMin", [X], {"axes": [1]}, opset=13),
        Case("ReduceProd", [X], {"axes": [2]}, opset=13),
        Case("ReduceL2", [X], {"axes": [2]}, opset=13),
        Case("ReduceL1", [X], {"axes": [1]}, opset=13),
        Case("ReduceSumSquare", [X], {"axes": [1]}, opset=13),
        Case("ReduceLogSumExp", [X], {"axes": [2]}, opset=13),
        Case("ReduceLogSum", [rt("x", f(3, 4, 5, lo=0.1))], {"axes": [1]}, opset=13),
        Case("ArgMax", [X], {"axis": 1, "keepdims": 0}),
        Case("ArgMin", [X], {"axis": -1}),
        Case(
            "ArgMax",
            [rt("x", np.array([[1, 3, 3], [2, 2, 0]], np.float32))],
            {"axis": 1, "select_last_index": 1},
            id="ArgMax-last",
        ),
        Case("TopK", [X, k("k", i64(2))], {"axis": 1, "largest": 0}, outputs=2),
        Case("TopK", [X, k("k", i64(3))], outputs=2, id="TopK-last"),
        Case("CumSum", [X, k("axis", np.array(1, np.int64))], {"exclusive": 1, "reverse": 1}),
    ]


def _nn_cases() -> list[Case]:
    w = f(6, 4, 3, 3)
    b = f(6)
    return [
        Case("Conv", [IMG, k("w", w), k("b", b)], {"pads": [1, 1, 1, 1]}, id="Conv-same"),
        Case("Conv", [IMG, k("w", w)], {"pads": [1, 0, 1, 2], "strides": [2, 2]}, id="Conv-asym-stride"),
        Case("Conv", [IMG, k("w", w), k("b", b)], {"dilations": [2, 2], "pads": [2, 2, 2, 2]}, id="Conv-dilated"),
        Case("Conv", [IMG, k("w", f(6, 2, 3, 3))], {"group": 2}, id="Conv-groups"),
        Case(
            "Conv", [IMG, k("w", f(8, 1, 3, 3)), k("b", f(8))], {"group": 4, "pads": [1, 1, 1, 1]}, id="Conv-depthwise"
        ),
        Case("Conv", [IMG, k("w", w)], {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, id="Conv-same-upper"),
        Case(
            "Conv", [IMG, k("w", w)], {"auto_pad": "SAME_LOWER", "strides": [2, 2]}, static=True, id="Conv-same-lower"
        ),
        Case("Conv", [IMG, k("w", w)], {"auto_pad": "VALID"}, id="Conv-valid"),
        Case(
            "Conv",
            [rt("x", f(2, 4, 11)), k("w", f(6, 4, 3)), k("b", b)],
            {"pads": [1, 2], "strides": [2]},
            id="Conv-1d",
        ),
        Case(  # torchvision's video stem (r3d_18): (3, 7, 7) kernel, strided over H and W only
            "Conv",
            [rt("x", f(2, 3, 4, 9, 10)), k("w", f(5, 3, 3, 7, 7)), k("b", f(5))],
            {"pads": [1, 3, 3, 1, 3, 3], "strides": [1, 2, 2]},
            id="Conv-3d",
        ),
        Case(
            "Conv",
            [rt("x", f(2, 3, 4, 9, 10)), k("w", f(5, 3, 1, 3, 3))],
            {"auto_pad": "SAME_UPPER"},
            id="Conv-3d-same",
        ),
        Case(
            "MaxPool",
            [rt("x", f(2, 3, 4, 9, 10))],
            {"kernel_shape": [1, 3, 3], "strides": [1, 2, 2], "pads": [0, 1, 1, 0, 1, 1]},
            id="MaxPool-3d",
        ),
        Case(
            "MaxPool",
            [rt("x", f(2, 3, 5, 9, 10))],
            {"kernel_shape": [3, 3, 3], "strides": [2, 2, 2], "auto_pad": "SAME_UPPER"},
            id="MaxPool-3d-same",
        ),
        Case("AveragePool", [rt("x", f(2, 3, 4, 9, 10))], {"kernel_shape": [2, 2, 2]}, id="AvgPool-3d"),
        Case("MaxPool", [IMG], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        Case("MaxPool", [IMG], {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}, id="MaxPool-ceil"),
        Case(
            "MaxPool", [IMG], {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}, id="MaxPool-same"
        ),
        Case("MaxPool", [rt("x", f(2, 4, 11))], {"kernel_shape": [3], "strides": [2]}, id="MaxPool-1d"),
        Case(
            "AveragePool", [IMG], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, id="AvgPool-excl"
        ),
        Case(
            "AveragePool",
            [IMG],
            {"kernel_shape": [3, 3], "pads": [1, 0, 1, 2], "count_include_pad": 1},
            id="AvgPool-incl",
        ),
        Case("AveragePool", [IMG], {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}, id="AvgPool-ceil"),
        Case("AveragePool", [IMG], {"kernel_shape": [3, 3]}, id="AvgPool-valid"),
        Case(
            "ConvTranspose",
            [IMG, k("w", f(4, 3, 3, 3)), k("b", f(3))],
            {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]},
        ),
        Case(
            "ConvTranspose",
            [IMG, k("w", f(4, 2, 2, 3))],
            {"strides": [2, 1], "pads": [0, 1, 1, 0], "group": 2},
            id="ConvTranspose-groups",
        ),
        Case("ConvTranspose", [rt("x", f(2, 4, 7)), k("w", f(4, 3, 4))], {"strides": [3]}, id="ConvTranspose-1d"),
        Case(
            "Resize",
            [IMG, ("", None, False), k("sc", np.array([1, 1, 2, 2], np.float32))],
            {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
            id="Resize-nearest",
        ),
        Case(
            "Resize",
            [IMG, ("", None, False), k("sc", np.array([1, 1, 2, 3], np.float32))],
            {"mode": "linear"},
            id="Resize-linear-half-pixel",
        ),
        Case(
            "Resize",
            [IMG, ("", None, False), ("", None, False), k("sz", i64(2, 4, 5, 13))],
            {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
            id="Resize-linear-corners",
        ),
        Case(
            "Resize",
            [IMG, ("", None, False), ("", None, False), k("sz", i64(2, 4, 3, 4))],
            {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"},
            id="Resize-linear-down",
        ),
        Case(  # F.interpolate(mode="bicubic"): ONNX's a = -0.75, which TF's bicubic (a = -0.5) is not
            "Resize",
            [IMG, ("", None, False), ("", None, False), k("sz", i64(2, 4, 13, 7))],
            {"mode": "cubic"},
            id="Resize-cubic-sizes",
        ),
        Case(
            "Resize",
            [IMG, ("", None, False), k("sc", np.array([1, 1, 2, 1.5], np.float32))],
            {
                "mode": "cubic",
                "coordinate_transformation_mode": "asymmetric",
                "cubic_coeff_a": -0.5,
                "exclude_outside": 1,
            },
            id="Resize-cubic-scales",
        ),
        Case(
            "Resize",
            [IMG, ("", None, False), k("sc", np.array([1, 1, 1.5, 2], np.float32))],
            {"mode": "nearest", "coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_floor"},
            id="Resize-nearest-half-pixel",
        ),
        Case("Upsample", [IMG, k("sc", np.array([1, 1, 2, 3], np.float32))], opset=9),
        Case("DepthToSpace", [rt("x", f(2, 8, 3, 5))], {"blocksize": 2}, id="DepthToSpace-DCR"),
        Case("DepthToSpace", [rt("x", f(2, 8, 3, 5))], {"blocksize": 2, "mode": "CRD"}, id="DepthToSpace-CRD"),
        Case("SpaceToDepth", [rt("x", f(2, 3, 4, 6))], {"blocksize": 2}),
        Case("GlobalAveragePool", [IMG]),
        Case("GlobalMaxPool", [IMG]),
        Case("GlobalAveragePool", [X], id="GAP-1d"),
        Case("BatchNormalization", [IMG, k("s", f(4)), k("b", f(4)), k("m", f(4)), k("v", f(4, lo=0.5))]),
        Case(
            "BatchNormalization",
            [rt("x", f(3, 4)), k("s", f(4)), k("b", f(4)), k("m", f(4)), k("v", f(4, lo=0.5))],
            id="BatchNorm-2d",
        ),
        Case(
            "BatchNormalization",
            [X, rt("s", f(4)), rt("b", f(4)), rt("m", f(4)), rt("v", f(4, lo=0.5))],
            id="BatchNorm-dynamic",
        ),
        Case("InstanceNormalization", [IMG, k("s", f(4)), k("b", f(4))]),
        Case("LayerNormalization", [X, k("s", f(5)), k("b", f(5))]),
        Case("LayerNormalization", [X, k("s", f(4, 5))], {"axis": 1, "epsilon": 1e-3}, id="LayerNorm-axis1"),
    ]


def _shape_cases() -> list[Case]:
    return [
        Case("Shape", [X], opset=15),
        Case("Shape", [X], {"start": 1, "end": -1}, opset=15, id="Shape-start-end"),
        Case("Size", [X]),
        Case("Reshape", [X, k("s", i64(0, -1))]),
        Case("Reshape", [X, k("s", i64(3, 20))], {"allowzero": 1}, opset=14, static=True, id="Reshape-allowzero"),
        Case("Reshape", [rt("x", f(2, 3, 4)), rt("s", i64(0, 4, 3))], static=True, id="Reshape-dynamic-shape"),
        Case("Flatten", [IMG], {"axis": 2}),
        Case("Flatten", [IMG], {"axis": 0}, id="Flatten-0"),
        Case("Flatten", [IMG], {"axis": -1}, id="Flatten-neg"),
        Case("Unsqueeze", [X], {"axes": [0, -1]}, opset=11, id="Unsqueeze-attr"),
        Case("Unsqueeze", [X, k("axes", i64(1, -1))], opset=13),
        Case("Squeeze", [rt("x", f(3, 1, 5, 1))], {"axes": [-1]}, opset=11, id="Squeeze-attr"),
        Case("Squeeze", [rt("x", f(3, 1, 5, 1)), k("axes", i64(1, 3))], opset=13),
        Case("Squeeze", [rt("x", f(3, 1, 5, 1))], opset=13, static=True, id="Squeeze-all"),
        Case("Transpose", [IMG], {"perm": [0, 2, 3, 1]}),
        Case("Transpose", [X], id="Transpose-default"),
        Case("Expand", [rt("x", f(3, 1)), k("s", i64(2, 1, 4))]),
        Case("Expand", [rt("x", f(3, 1)), rt("s", i64(2, 3, 4))], id="Expand-dynamic-shape"),
        Case("Tile", [X, k("r", i64(1, 2, 3))]),
        Case("Concat", [X, rt("y", f(3, 2, 5)), k("z", f(3, 1, 5))], {"axis": -2}),
        Case("Split", [X], {"axis": 2, "split": [2, 3]}, outputs=2, opset=11, id="Split-attr"),
        Case("Split", [X, k("s", i64(1, 3))], {"axis": 1}, outputs=2, opset=13),
        Case("Split", [X], {"axis": -1, "num_outputs": 2}, outputs=2, opset=18, id="Split-uneven"),
    ]


def _index_cases() -> list[Case]:
    big = np.iinfo(np.int64).max
    return [
        Case("Gather", [X, k("i", i64(-1, 0, 2))], {"axis": 1}, id="Gather-const-neg"),
        Case("Gather", [rt("e", f(10, 4)), rt("i", np.array([[1, -1], [3, 0]], np.int64))], id="Gather-dynamic-neg"),
        Case("Gather", [X, k("i", np.array(-1, np.int64))], {"axis": 2}, id="Gather-scalar"),
        Case("GatherND", [rt("x", f(3, 4)), k("i", np.array([[0, 1], [2, 3]], np.int64))]),
        Case("Slice", [X, k("s", i64(1, -4)), k("e", i64(big, -1)), k("a", i64(1, 2))], opset=13, id="Slice-int-max"),
        Case(
            "Slice", [X, k("s", i64(-1)), k("e", i64(-big - 1)), k("a", i64(2)), k("st", i64(-2))], id="Slice-neg-step"
        ),
        Case("Slice", [X], {"starts": [1], "ends": [3], "axes": [1]}, opset=9, id="Slice-attrs"),
        Case("Slice", [X, rt("s", i64(1, 0)), rt("e", i64(3, big))], static=True, id="Slice-dynamic"),
        Case("Pad", [IMG, k("p", i64(0, 0, 1, 2, 0, 0, 2, 1)), k("v", np.array(0.5, np.float32))]),
        Case("Pad", [X, k("p", i64(0, 1, 2, 0, 2, 1))], {"mode": "reflect"}, id="Pad-reflect"),
        Case(
            "Pad", [X, k("p", i64(1, 1)), k("v", np.array(0.0, np.float32)), k("a", i64(-1))], opset=18, id="Pad-axes"
        ),
        Case("Cast", [X], {"to": 7}),
        Case("Cast", [rt("x", i64(1, 2, 3))], {"to": 1}, id="Cast-int-float"),
        Case("CastLike", [X, k("t", i64(0))], opset=15),
        Case("ConstantOfShape", [rt("s", i64(2, 3))], {"value": np.array([1.5], np.float32)}, static=True),
        Case(
            "Range",
            [rt("a", np.array(1, np.int64)), rt("b", np.array(9, np.int64)), k("d", np.array(2, np.int64))],
            static=True,
        ),
        Case("Trilu", [X, k("k", np.array(1, np.int64))], opset=14),
        Case("Trilu", [X], {"upper": 0}, opset=14, id="Trilu-lower"),
        *_scatter_cases(),
    ]


def _scatter_cases() -> list[Case]:
    """Issue 12 item 1: the element-indexed ops Hugging Face models and detection heads emit."""
    idx = np.array([[[0, 2, -1, 1, 0]] * 4] * 3, np.int64)  # (3, 4, 5) picks along axis 1 (size 4), one negative
    small = rt("i", _rng.integers(0, 4, (3, 2, 5)).astype(np.int64))  # shorter than data on axis 1
    upd = rt("u", f(3, 2, 5))
    return [
        Case("GatherElements", [X, rt("i", idx % 4 - (idx < 0))], {"axis": 1}),
        Case(
            "GatherElements",
            [X, k("i", np.array([[[4, -1, 0]]] * 3, np.int64).repeat(4, 1))],
            {"axis": -1},
            id="GatherElements-last-neg",
        ),
        Case("GatherElements", [X, small], {"axis": 1}, id="GatherElements-shorter"),
        Case(
            "ScatterElements",
            [X, k("i", np.array([[[0, 1, 2, 3, 0], [1, 2, 3, 0, 1]]] * 3, np.int64)), upd],
            {"axis": 1},
            opset=16,
        ),
        Case(
            "ScatterElements",
            [X, k("i", np.array([[[0, 1, 2, 3, 0], [1, 2, 3, 0, 1]]] * 3, np.int64)), upd],
            {"axis": 1, "reduction": "add"},
            opset=16,
            id="ScatterElements-add",
        ),
        Case("ScatterND", [X, k("i", np.array([[0, 1], [2, -1]], np.int64)), rt("u", f(2, 5))], opset=16),
        Case(
            "ScatterND",
            [rt("x", f(4, 3)), k("i", np.array([[3], [0]], np.int64)), rt("u", f(2, 3))],
            {"reduction": "add"},
            opset=16,
            static=True,
            id="ScatterND-add-rows",
        ),
        Case("NonZero", [rt("x", (_rng.random((3, 4)) > 0.5).astype(np.float32))]),
        Case(
            "OneHot",
            [
                rt("i", np.array([[0, 3, -1], [2, 1, 0]], np.int64)),
                k("d", np.array(4, np.int64)),
                k("v", np.array([0.0, 2.5], np.float32)),
            ],
            {"axis": -1},
            opset=11,
        ),
        Case(
            "OneHot",
            [
                rt("i", np.array([1, 0, 2], np.int64)),
                k("d", np.array([3], np.int64)),
                k("v", np.array([-1.0, 1.0], np.float32)),
            ],
            {"axis": 0},
            opset=11,
            id="OneHot-axis0",
        ),
        Case(
            "Where",
            [rt("c", _rng.random((1, 5)) > 0.5), rt("x", f(3, 4, 1)), rt("y", f(4, 5))],
            id="Where-broadcast-all",
        ),
    ]


def _rnn_cases() -> list[Case]:
    t, b, i, h = 5, 3, 4, 6
    xs = rt("x", f(t, b, i))

    def lstm(d: int) -> list[tuple[str, np.ndarray | None, bool]]:
        return [
            xs,
            k("W", f(d, 4 * h, i, lo=-0.5, hi=0.5)),
            k("R", f(d, 4 * h, h, lo=-0.5, hi=0.5)),
            k("B", f(d, 8 * h, lo=-0.5, hi=0.5)),
            ("", None, False),
            rt("h0", f(d, b, h)),
            rt("c0", f(d, b, h)),
        ]

    def gru(d: int) -> list[tuple[str, np.ndarray | None, bool]]:
        return [
            xs,
            k("W", f(d, 3 * h, i, lo=-0.5, hi=0.5)),
            k("R", f(d, 3 * h, h, lo=-0.5, hi=0.5)),
            k("B", f(d, 6 * h, lo=-0.5, hi=0.5)),
            ("", None, False),
            rt("h0", f(d, b, h)),
        ]

    peep = [*lstm(1), k("P", f(1, 3 * h, lo=-0.5, hi=0.5))]
    return [
        Case("LSTM", lstm(1), {"hidden_size": h}, outputs=3, id="LSTM-forward"),
        Case("LSTM", lstm(1), {"hidden_size": h, "direction": "reverse"}, outputs=3, id="LSTM-reverse"),
        Case("LSTM", lstm(2), {"hidden_size": h, "direction": "bidirectional"}, outputs=3, id="LSTM-bidirectional"),
        Case("LSTM", lstm(1)[:4], {"hidden_size": h}, outputs=3, id="LSTM-no-initial"),
        Case("LSTM", peep, {"hidden_size": h, "clip": 0.8}, outputs=3, id="LSTM-peephole-clip"),
        Case("LSTM", lstm(1), {"hidden_size": h, "input_forget": 1}, outputs=3, id="LSTM-input-forget"),
        Case("GRU", gru(1), {"hidden_size": h}, outputs=2, id="GRU"),
        Case(
            "GRU",
            gru(2),
            {"hidden_size": h, "direction": "bidirectional", "linear_before_reset": 1},
            outputs=2,
            id="GRU-bidirectional-lbr",
        ),
    ]


CASES = _cases()


@pytest.fixture(scope="module")
def batch() -> Batch:
    return Batch(CASES)


@pytest.fixture(scope="module")
def lite_batch() -> Batch:
    pytest.importorskip("ai_edge_litert")
    return Batch(CASES, tflite=True)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.key) for c in CASES])
def test_op_matches_onnxruntime(case: Case, batch: Batch) -> None:
    batch.check(case)


@pytest.mark.slow
@pytest.mark.parametrize("case", [pytest.param(c, id=c.key) for c in CASES])
def test_op_converts_to_tflite_builtins(case: Case, lite_batch: Batch) -> None:
    """The SavedModel of every op converts with builtin ops only and still matches onnxruntime."""
    lite_batch.check(case)


def test_ids_are_unique() -> None:
    keys = [c.key for c in CASES]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
