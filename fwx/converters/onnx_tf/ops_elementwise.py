"""Element-wise ops: unary activations, broadcasting binary ops, comparisons, logic, Where.

All of them keep a channels-last input channels-last (broadcast constants are
permuted to match), so a Conv -> BatchNorm -> Relu -> Add chain never
transposes in between.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from fwx.converters.onnx_tf.context import TO_NHWC, ChannelsLast, NodeCtx
from fwx.converters.onnx_tf.table import op

Fn = Callable[..., Any]


def _cl_operand(c: NodeCtx, i: int) -> tf.Tensor | None:
    """Input ``i`` in channels-last layout, or None when that would cost a reshape at run time."""
    if c.is_cl(i):
        return c.cl(i)
    k = c.const(i)
    if k is not None and k.ndim <= 4:
        if k.size == 1:
            return c.env.materialize(k.reshape(()) if k.ndim == 0 else k.reshape((1,) * k.ndim))
        full = k.reshape((1,) * (4 - k.ndim) + k.shape)
        return c.env.materialize(np.ascontiguousarray(np.transpose(full, TO_NHWC)))
    if c.rank(i) == 4:
        return c.cl(i)
    return None


def elementwise(c: NodeCtx, fn: Fn) -> Any:
    """Apply ``fn`` to all present inputs, channels-last when any input already is."""
    idx = [i for i in range(c.n_inputs) if c.has(i)]
    if any(c.is_cl(i) for i in idx):
        cl = [_cl_operand(c, i) for i in idx]
        if all(t is not None for t in cl):
            return ChannelsLast(fn(*cl))
    return fn(*[c.t(i) for i in idx])


def _apply(fn: Fn) -> Callable[[NodeCtx], Any]:
    return lambda c: elementwise(c, fn)


# Rational approximation of erf used by Eigen/XLA for float32 (max error ~1 ulp on [-4, 4]);
# TFLite has no ERF builtin, so erf is spelled with builtins.
_ERF_ALPHA = (
    -2.72614225801306e-10,
    2.77068142495902e-08,
    -2.10102402082508e-06,
    -5.69250639462346e-05,
    -7.34990630326855e-04,
    -2.95459980854025e-03,
    -1.60960333262415e-02,
)
_ERF_BETA = (
    -1.45660718464996e-05,
    -2.13374055278905e-04,
    -1.68282697438203e-03,
    -7.37332916720468e-03,
    -1.42647390514189e-02,
)


def erf(x: tf.Tensor) -> tf.Tensor:
    x = tf.clip_by_value(x, -4.0, 4.0)
    x2 = x * x
    p = tf.constant(_ERF_ALPHA[0], x.dtype)
    for a in _ERF_ALPHA[1:]:
        p = p * x2 + a
    q = tf.constant(_ERF_BETA[0], x.dtype)
    for b in _ERF_BETA[1:]:
        q = q * x2 + b
    return x * p / q


def _hard_sigmoid(c: NodeCtx) -> Any:
    alpha, beta = float(c.attr("alpha", 0.2)), float(c.attr("beta", 0.5))
    return elementwise(c, lambda x: tf.clip_by_value(x * alpha + beta, 0.0, 1.0))


def _abs(x: tf.Tensor) -> tf.Tensor:
    # TFLite's ABS has no int64 kernel (T5's relative position buckets take |i - j| of int64 positions);
    # MAXIMUM and NEG have one, and max(x, -x) is |x| for every int64 but the minimum, as tf.abs is
    return tf.maximum(x, -x) if x.dtype == tf.int64 else tf.abs(x)


def _sign(x: tf.Tensor) -> tf.Tensor:
    # TFLite's SIGN has no int64 kernel either (DeBERTa's log-bucketed relative positions take sign(i - j))
    if x.dtype == tf.int64:
        return tf.cast(x > 0, tf.int64) - tf.cast(x < 0, tf.int64)
    return tf.sign(x)


_UNARY: dict[str, Fn] = {
    "Abs": _abs,
    "Neg": tf.negative,
    "Exp": tf.exp,
    "Log": tf.math.log,
    "Sqrt": tf.sqrt,
    "Reciprocal": lambda x: 1.0 / x,
    "Floor": tf.floor,
    "Ceil": tf.math.ceil,
    "Round": tf.round,
    "Sign": _sign,
    "Sin": tf.sin,
    "Cos": tf.cos,
    "Tan": lambda x: tf.sin(x) / tf.cos(x),
    "Tanh": tf.tanh,
    "Sigmoid": tf.sigmoid,
    "Relu": tf.nn.relu,
    "Erf": erf,
    "Not": tf.logical_not,
    "IsNaN": lambda x: tf.not_equal(x, x),
    "Softplus": tf.nn.softplus,
    "Softsign": tf.nn.softsign,
    "HardSwish": lambda x: x * tf.nn.relu6(x + 3.0) / 6.0,
    "Mish": lambda x: x * tf.tanh(tf.nn.softplus(x)),
    "Identity": tf.identity,
}
for _name, _fn in _UNARY.items():
    op(_name)(_apply(_fn))
op("HardSigmoid")(_hard_sigmoid)


@op("LeakyRelu")
def _leaky_relu(c: NodeCtx) -> Any:
    alpha = float(c.attr("alpha", 0.01))
    return elementwise(c, lambda x: tf.nn.leaky_relu(x, alpha))


@op("Elu")
def _elu(c: NodeCtx) -> Any:
    alpha = float(c.attr("alpha", 1.0))
    return elementwise(c, lambda x: tf.where(x > 0, x, alpha * (tf.exp(x) - 1.0)))


@op("Selu")
def _selu(c: NodeCtx) -> Any:
    alpha, gamma = float(c.attr("alpha", 1.67326319217681884765625)), float(c.attr("gamma", 1.05070102214813232421875))
    return elementwise(c, lambda x: gamma * tf.where(x > 0, x, alpha * (tf.exp(x) - 1.0)))


@op("Gelu")
def _gelu(c: NodeCtx) -> Any:
    approx = c.attr("approximate", "none") == "tanh"
    return elementwise(c, lambda x: tf.nn.gelu(x, approximate=approx))


@op("IsInf")
def _is_inf(c: NodeCtx) -> Any:
    """Compared against the largest finite value: TFLite mis-folds comparisons with an inf constant."""
    pos, neg = int(c.attr("detect_positive", 1)), int(c.attr("detect_negative", 1))

    def is_inf(x: tf.Tensor) -> tf.Tensor:
        big = float(x.dtype.max)
        if pos and neg:
            return tf.abs(x) > big
        return x > big if pos else (x < -big if neg else tf.zeros_like(x, tf.bool))

    return elementwise(c, is_inf)


@op("Clip")
def _clip(c: NodeCtx) -> Any:
    if c.opset < 11:
        lo, hi = c.attr("min"), c.attr("max")
    else:
        lo = float(np.asarray(c.static(1, "min"))) if c.has(1) and c.const(1) is not None else None
        hi = float(np.asarray(c.static(2, "max"))) if c.has(2) and c.const(2) is not None else None
        if (c.has(1) and lo is None) or (c.has(2) and hi is None):
            return _clip_dynamic(c)
    if lo == 0.0 and hi == 6.0:
        return _first_only(c, tf.nn.relu6)

    def clip(x: tf.Tensor) -> tf.Tensor:
        if lo is not None:
            x = tf.maximum(x, tf.cast(lo, x.dtype))
        if hi is not None:
            x = tf.minimum(x, tf.cast(hi, x.dtype))
        return x

    return _first_only(c, clip)


def _clip_dynamic(c: NodeCtx) -> tf.Tensor:
    x = c.t(0)
    if c.has(1):
        x = tf.maximum(x, c.t(1))
    if c.has(2):
        x = tf.minimum(x, c.t(2))
    return x


def _first_only(c: NodeCtx, fn: Fn) -> Any:
    v = c.value(0)
    if isinstance(v, ChannelsLast):
        return ChannelsLast(fn(v.t))
    return fn(c.t(0))


@op("Dropout")
def _dropout(c: NodeCtx) -> Any:
    """Inference: the identity, and an all-true mask if anyone asks for it."""
    y = _first_only(c, tf.identity)
    if len(c.node.outputs) > 1 and c.node.outputs[1]:
        return y, tf.ones_like(c.t(0), dtype=tf.bool)
    return y


def _trunc_div(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """C-style integer division, spelled with TFLite builtins (FLOOR_DIV exists for int32 only)."""
    a32, b32 = tf.cast(a, tf.int32), tf.cast(b, tf.int32)
    q = tf.math.floordiv(tf.abs(a32), tf.abs(b32)) * tf.sign(a32) * tf.sign(b32)
    return tf.cast(q, a.dtype)


def _div(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    return _trunc_div(a, b) if a.dtype.is_integer else a / b


def _fmod(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """C fmod (sign of the dividend); TFLite has FLOOR_MOD but no TRUNCATE_MOD."""
    if a.dtype.is_integer:
        return a - b * _trunc_div(a, b)
    q = a / b
    return a - b * (tf.sign(q) * tf.floor(tf.abs(q)))


def _pow(c: NodeCtx) -> Any:
    k = c.const(1)
    if k is not None and k.size == 1:
        e = float(k.reshape(-1)[0])
        simple: dict[float, Fn] = {
            1.0: tf.identity,
            2.0: lambda x: x * x,
            3.0: lambda x: x * x * x,
            0.5: tf.sqrt,
            -1.0: lambda x: 1.0 / x,
            -0.5: tf.math.rsqrt,
        }
        if e in simple and c.dtype(0).is_floating:
            return _first_only(c, simple[e])
    x, y = c.t(0), c.t(1)
    return tf.pow(x, tf.cast(y, x.dtype))


@op("Pow")
def _pow_op(c: NodeCtx) -> Any:
    return _pow(c)


@op("Mod")
def _mod(c: NodeCtx) -> Any:
    fn = _fmod if int(c.attr("fmod", 0)) else tf.math.floormod
    return elementwise(c, fn)


def _prelu(x: tf.Tensor, slope: tf.Tensor) -> tf.Tensor:
    return tf.where(x >= 0, x, x * slope)


def _variadic(fn: Fn) -> Fn:
    def apply(*xs: tf.Tensor) -> tf.Tensor:
        out = xs[0]
        for x in xs[1:]:
            out = fn(out, x)
        return out

    return apply


_BINARY: dict[str, Fn] = {
    "Add": tf.add,
    "Sub": tf.subtract,
    "Mul": tf.multiply,
    "Div": _div,
    "Equal": tf.equal,
    "Less": tf.less,
    "LessOrEqual": tf.less_equal,
    "Greater": tf.greater,
    "GreaterOrEqual": tf.greater_equal,
    "And": tf.logical_and,
    "Or": tf.logical_or,
    "Xor": tf.not_equal,
    "PRelu": _prelu,
    "Max": _variadic(tf.maximum),
    "Min": _variadic(tf.minimum),
    "Sum": _variadic(tf.add),
    "Mean": lambda *xs: _variadic(tf.add)(*xs) / float(len(xs)),
    "Where": lambda cond, x, y: tf.where(cond, x, y),
}
for _name, _fn in _BINARY.items():
    op(_name)(_apply(_fn))
