"""Each elementwise op against onnxruntime on random inputs, with broadcasting."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx_torch_helpers import check_model, node_model, rand

X = rand(2, 3, 4)
POS = np.abs(rand(2, 3, 4, seed=1)) + 0.1
INTS = np.array([[-7, -3, 0, 5], [9, -1, 4, -8]], dtype=np.int64)
INTS_B = np.array([2, -3, 5, 3], dtype=np.int64)
BOOLS = rand(2, 3, 4, seed=2) > 0
BOOLS_B = rand(4, seed=3) > 0

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
    "Tanh",
    "Sigmoid",
    "Relu",
    "Erf",
    "Softplus",
    "Softsign",
    "HardSwish",
    "Atan",
    "IsNaN",
    "Tan",
    "Sinh",
    "Cosh",
]


@pytest.mark.parametrize("op_type", UNARY)
def test_unary(op_type: str) -> None:
    check_model(node_model(op_type, {"x": X * 3}, opset=17), {"x": X * 3})


@pytest.mark.parametrize("op_type", ["Log", "Sqrt", "Reciprocal"])
def test_unary_positive(op_type: str) -> None:
    check_model(node_model(op_type, {"x": POS}), {"x": POS})


def test_not() -> None:
    check_model(node_model("Not", {"x": BOOLS}), {"x": BOOLS})


def test_mish_opset18() -> None:
    check_model(node_model("Mish", {"x": X}, opset=18), {"x": X})


@pytest.mark.parametrize("op_type", ["Asin", "Acos"])
def test_unary_unit_interval(op_type: str) -> None:
    x = np.tanh(X)
    check_model(node_model(op_type, {"x": x}), {"x": x})


def test_isinf_and_bitwise() -> None:
    x = np.array([1.0, np.inf, -np.inf, 0.0], np.float32)
    for pos, neg in ((1, 1), (1, 0), (0, 1)):
        check_model(node_model("IsInf", {"x": x}, detect_positive=pos, detect_negative=neg), {"x": x})
    for op_type in ("BitwiseAnd", "BitwiseOr"):
        check_model(node_model(op_type, {"a": INTS, "b": INTS_B}, opset=18), {"a": INTS, "b": INTS_B})


@pytest.mark.parametrize(
    ("op_type", "attrs"),
    [
        ("LeakyRelu", {"alpha": 0.2}),
        ("Elu", {"alpha": 0.7}),
        ("Selu", {}),
        ("Selu", {"alpha": 1.5, "gamma": 2.0}),
        ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
        ("Celu", {"alpha": 1.3}),
        ("ThresholdedRelu", {"alpha": 0.5}),
    ],
)
def test_parametric_activation(op_type: str, attrs: dict[str, Any]) -> None:
    check_model(node_model(op_type, {"x": X * 2}, **attrs), {"x": X * 2})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_opset20(approximate: str) -> None:
    check_model(node_model("Gelu", {"x": X}, opset=20, approximate=approximate), {"x": X})


def test_prelu_broadcast_slope() -> None:
    slope = rand(3, 1, seed=4)
    check_model(node_model("PRelu", {"x": X}, consts={"s": slope}), {"x": X})


@pytest.mark.parametrize(
    "op_type", ["Add", "Sub", "Mul", "Div", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Max", "Min"]
)
def test_binary_broadcast_float(op_type: str) -> None:
    a, b = rand(2, 1, 4, seed=5), rand(3, 1, seed=6)
    b[0, 0] = a[0, 0, 0]  # one tie for the comparisons
    check_model(node_model(op_type, {"a": a, "b": b}), {"a": a, "b": b})


@pytest.mark.parametrize("op_type", ["Add", "Sub", "Mul", "Div", "Equal", "Max", "Min"])
def test_binary_int(op_type: str) -> None:
    check_model(node_model(op_type, {"a": INTS, "b": INTS_B}), {"a": INTS, "b": INTS_B})


@pytest.mark.parametrize(("fmod", "a", "b"), [(0, INTS, INTS_B), (1, INTS, INTS_B), (1, X * 5, rand(4, seed=7) + 2)])
def test_mod(fmod: int, a: np.ndarray, b: np.ndarray) -> None:
    check_model(node_model("Mod", {"a": a, "b": b}, fmod=fmod), {"a": a, "b": b})


@pytest.mark.parametrize(
    "exponent",
    [np.array(2.0, dtype=np.float32), np.array([1, 2, 3, 0], dtype=np.int64), np.array(0.5, dtype=np.float32)],
)
def test_pow(exponent: np.ndarray) -> None:
    check_model(node_model("Pow", {"x": POS}, consts={"e": exponent}), {"x": POS})


@pytest.mark.parametrize("op_type", ["And", "Or", "Xor"])
def test_logic(op_type: str) -> None:
    check_model(node_model(op_type, {"a": BOOLS, "b": BOOLS_B}), {"a": BOOLS, "b": BOOLS_B})


@pytest.mark.parametrize("op_type", ["Sum", "Mean", "Max", "Min"])
def test_variadic(op_type: str) -> None:
    feeds = {"a": rand(2, 3, 4, seed=8), "b": rand(3, 4, seed=9), "c": rand(4, seed=10)}
    check_model(node_model(op_type, feeds), feeds)


def test_where_broadcast() -> None:
    feeds = {"c": BOOLS_B, "a": rand(2, 3, 4, seed=11), "b": rand(3, 1, seed=12)}
    check_model(node_model("Where", feeds), feeds)


@pytest.mark.parametrize(("x", "to"), [(X * 5, 7), (INTS, 1), (X, 9), (INTS, 6), (X, 10)])
def test_cast(x: np.ndarray, to: int) -> None:
    check_model(node_model("Cast", {"x": x}, to=to), {"x": x})


def test_cast_like() -> None:
    check_model(node_model("CastLike", {"x": INTS}, consts={"t": np.zeros(1, np.float32)}), {"x": INTS})


def test_clip_inputs_and_attrs() -> None:
    check_model(
        node_model("Clip", {"x": X}, consts={"lo": np.float32(-0.5), "hi": np.float32(0.7)}, opset=13), {"x": X}
    )
    check_model(node_model("Clip", {"x": X}, consts={"hi": np.float32(0.2)}, input_order=["x", "", "hi"]), {"x": X})
    check_model(node_model("Clip", {"x": X}, opset=6, min=-0.1, max=0.3), {"x": X})
