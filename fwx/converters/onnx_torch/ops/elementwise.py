"""Elementwise ops: unary math, binary arithmetic with broadcasting, comparisons, logic, Cast.

Arithmetic on shape values (``Sym``) stays int arithmetic on sizes, so a
reshape target such as ``[batch, seq * heads, -1]`` is still symbolic when it
reaches Reshape.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import replace
from functools import reduce
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812

from fwx.converters.onnx_torch import graph_fns as gf
from fwx.converters.onnx_torch.builder import GraphBuilder
from fwx.converters.onnx_torch.ops.registry import OnnxNode, op
from fwx.converters.onnx_torch.values import INT_DTYPES, Const, Item, SInt, Sym, Value, as_items, dtype_of, torch_dtype

UNARY: dict[str, Callable[..., Any]] = {
    "Abs": torch.abs,
    "Neg": torch.neg,
    "Exp": torch.exp,
    "Log": torch.log,
    "Sqrt": torch.sqrt,
    "Reciprocal": torch.reciprocal,
    "Floor": torch.floor,
    "Ceil": torch.ceil,
    "Round": torch.round,
    "Sign": torch.sign,
    "Sin": torch.sin,
    "Cos": torch.cos,
    "Tan": torch.tan,
    "Asin": torch.asin,
    "Acos": torch.acos,
    "Atan": torch.atan,
    "Sinh": torch.sinh,
    "Cosh": torch.cosh,
    "Tanh": torch.tanh,
    "Sigmoid": torch.sigmoid,
    "Relu": torch.relu,
    "Erf": torch.erf,
    "Not": torch.logical_not,
    "IsNaN": torch.isnan,
    "Softplus": F.softplus,
    "Softsign": F.softsign,
    "HardSwish": F.hardswish,
    "Mish": F.mish,
}

BINARY: dict[str, Callable[..., Any]] = {
    "Add": torch.add,
    "Sub": torch.sub,
    "Mul": torch.mul,
    "Div": gf.div,
    "Pow": gf.pow_,
    "Equal": torch.eq,
    "Less": torch.lt,
    "LessOrEqual": torch.le,
    "Greater": torch.gt,
    "GreaterOrEqual": torch.ge,
    "And": torch.logical_and,
    "Or": torch.logical_or,
    "Xor": torch.logical_xor,
    "BitwiseAnd": torch.bitwise_and,
    "BitwiseOr": torch.bitwise_or,
}

_SIZE_OPS: dict[str, Callable[[int, int], int]] = {
    "Add": operator.add,
    "Sub": operator.sub,
    "Mul": operator.mul,
    "Div": operator.floordiv,
    "Mod": operator.mod,
}


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _broadcast(x: list[Item], y: list[Item]) -> tuple[list[Item], list[Item]] | None:
    n = max(len(x), len(y))
    if len(x) not in (1, n) or len(y) not in (1, n):
        return None
    return (x * n if len(x) == 1 else x), (y * n if len(y) == 1 else y)


def _sym_pair(x: Value, y: Value) -> tuple[list[Item], list[Item], bool] | None:
    """Both operands as items when at least one is a Sym (and the other a small int constant)."""
    if not (isinstance(x, Sym) or isinstance(y, Sym)):
        return None
    xa, ya = as_items(x), as_items(y)
    if xa is None or ya is None:
        return None
    pair = _broadcast(xa[0], ya[0])
    return None if pair is None else (pair[0], pair[1], xa[1] and ya[1])


def sym_arith(b: GraphBuilder, op_type: str, x: Value, y: Value) -> Value | None:
    pair = _sym_pair(x, y)
    if pair is None or op_type not in _SIZE_OPS:
        return None
    xs, ys, scalar = pair
    items: list[Item] = []
    for a, c in zip(xs, ys, strict=True):
        fn = _trunc_div if op_type == "Div" and isinstance(a, int) and isinstance(c, int) else _SIZE_OPS[op_type]
        items.append(b.int_op(fn, a, c))
    dtype = x.dtype if isinstance(x, Sym) else dtype_of(y)
    return b.sym(items, scalar, dtype)


def _decide_equal(a: Item, c: Item) -> bool | None:
    if isinstance(a, int) and isinstance(c, int):
        return a == c
    if a is c:
        return True
    if isinstance(a, SInt) and isinstance(c, int) and c < 0:
        return False  # a size is never negative
    if isinstance(c, SInt) and isinstance(a, int) and a < 0:
        return False
    return None


def sym_equal(x: Value, y: Value) -> Value | None:
    """Equal on shape values when every item is decidable at build time (e.g. ``size == -1``)."""
    pair = _sym_pair(x, y)
    if pair is None:
        return None
    decided = [_decide_equal(a, c) for a, c in zip(pair[0], pair[1], strict=True)]
    if any(d is None for d in decided):
        return None
    t = torch.tensor(decided[0] if pair[2] else decided, dtype=torch.bool)
    return Const(t)


@op(*UNARY)
def _unary(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.need(0)
    if n.op_type == "Neg" and isinstance(x, Sym):  # tf2onnx's ConvTranspose "same" pads: -(out - want)
        return b.sym([b.int_op(operator.sub, 0, a) for a in x.items], x.scalar, x.dtype, x.dims)
    return b.call(UNARY[n.op_type], x)


@op(*BINARY, "Mod")
def _binary(b: GraphBuilder, n: OnnxNode) -> Value:
    x, y = n.need(0), n.need(1)
    sym = sym_equal(x, y) if n.op_type == "Equal" else sym_arith(b, n.op_type, x, y)
    if sym is not None:
        return sym
    if n.op_type == "Mod":
        return b.call(torch.fmod if n.attr("fmod", 0) else torch.remainder, x, y)
    return b.call(BINARY[n.op_type], x, y)


def _sym_extreme(b: GraphBuilder, op_type: str, args: list[Value]) -> Value | None:
    """Max/Min of shape values as size arithmetic, so a reshape target built from them stays symbolic."""
    fn = gf.size_max if op_type == "Max" else gf.size_min
    acc = args[0]
    for v in args[1:]:
        pair = _sym_pair(acc, v)
        if pair is None:
            return None
        xs, ys, scalar = pair
        dtype = acc.dtype if isinstance(acc, Sym) else dtype_of(v)
        acc = b.sym([b.int_op(fn, a, c) for a, c in zip(xs, ys, strict=True)], scalar, dtype)
    return acc


@op("Max", "Min", "Sum", "Mean")
def _variadic(b: GraphBuilder, n: OnnxNode) -> Value:
    fns: dict[str, Callable[..., Any]] = {
        "Max": torch.maximum,
        "Min": torch.minimum,
        "Sum": torch.add,
        "Mean": torch.add,
    }
    fn = fns[n.op_type]
    args = [v for v in n.inputs if v is not None]
    if n.op_type in ("Max", "Min") and any(isinstance(v, Sym) for v in args):
        sym = _sym_extreme(b, n.op_type, args)
        if sym is not None:
            return sym
    out = reduce(lambda acc, v: b.call(fn, acc, v), args[1:], args[0])
    return b.call(torch.div, out, float(len(args))) if n.op_type == "Mean" and len(args) > 1 else out


@op("Where")
def _where(b: GraphBuilder, n: OnnxNode) -> Value:
    cond, x, y = n.need(0), n.need(1), n.need(2)
    if isinstance(cond, Const) and cond.value.dim() <= 1 and (isinstance(x, Sym) or isinstance(y, Sym)):
        pair = _sym_pair(x, y)
        flags = [bool(f) for f in cond.value.reshape(-1).tolist()]
        if pair is not None and len(flags) in (1, len(pair[0])):
            flags = flags * len(pair[0]) if len(flags) == 1 else flags
            items = [a if f else c for f, a, c in zip(flags, pair[0], pair[1], strict=True)]
            return b.sym(items, pair[2] and cond.value.dim() == 0, dtype_of(x))
    return b.call(torch.where, cond, x, y)


@op("Cast")
def _cast(b: GraphBuilder, n: OnnxNode) -> Value:
    x, to = n.need(0), torch_dtype(int(n.attr("to")))
    if isinstance(x, Sym) and to in INT_DTYPES and to != torch.uint8:
        return replace(x, dtype=to)
    return b.method("to", x, to)


@op("CastLike")
def _cast_like(b: GraphBuilder, n: OnnxNode) -> Value:
    x, to = n.need(0), dtype_of(n.need(1))
    if isinstance(x, Sym) and to in INT_DTYPES and to != torch.uint8:
        return replace(x, dtype=to)
    return b.method("to", x, to)


@op("LeakyRelu")
def _leaky_relu(b: GraphBuilder, n: OnnxNode) -> Value:
    return b.call(F.leaky_relu, n.need(0), float(n.attr("alpha", 0.01)))


@op("Elu", "Celu")
def _elu(b: GraphBuilder, n: OnnxNode) -> Value:
    return b.call(F.elu if n.op_type == "Elu" else F.celu, n.need(0), float(n.attr("alpha", 1.0)))


@op("Selu")
def _selu(b: GraphBuilder, n: OnnxNode) -> Value:
    alpha, gamma = float(n.attr("alpha", 1.67326319217681884765625)), float(n.attr("gamma", 1.05070102214813232421875))
    return b.call(torch.mul, b.call(F.elu, n.need(0), alpha), gamma)


@op("HardSigmoid")
def _hard_sigmoid(b: GraphBuilder, n: OnnxNode) -> Value:
    return b.call(gf.hard_sigmoid, n.need(0), float(n.attr("alpha", 0.2)), float(n.attr("beta", 0.5)))


@op("ThresholdedRelu")
def _thresholded_relu(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.need(0)
    return b.call(torch.where, b.call(torch.gt, x, float(n.attr("alpha", 1.0))), x, b.call(torch.zeros_like, x))


@op("PRelu")
def _prelu(b: GraphBuilder, n: OnnxNode) -> Value:
    x, slope = n.need(0), n.need(1)
    return b.call(torch.where, b.call(torch.lt, x, 0), b.call(torch.mul, x, slope), x)


@op("Gelu")
def _gelu(b: GraphBuilder, n: OnnxNode) -> Value:
    return b.call(F.gelu, n.need(0), approximate=str(n.attr("approximate", "none")))


@op("IsInf")
def _isinf(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.need(0)
    pos, neg = bool(n.attr("detect_positive", 1)), bool(n.attr("detect_negative", 1))
    if pos and neg:
        return b.call(torch.isinf, x)
    return b.call(torch.isposinf if pos else torch.isneginf, x)


@op("Clip")
def _clip(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.need(0)
    if n.opset < 11:
        return b.call(
            gf.clip, x, float(n.attr("min", -3.4028234663852886e38)), float(n.attr("max", 3.4028234663852886e38))
        )
    lo, hi = n.input(1), n.input(2)
    if lo is not None:
        x = b.call(torch.maximum, x, lo)
    if hi is not None:
        x = b.call(torch.minimum, x, hi)
    return x
