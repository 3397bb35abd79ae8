"""Linear algebra, reductions, softmax, arg/top-k and scans."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from fwx.converters.onnx_tf.context import TO_NHWC, ChannelsLast, NodeCtx
from fwx.converters.onnx_tf.table import op


@op("MatMul")
def _matmul(c: NodeCtx) -> tf.Tensor:
    """NumPy matmul: 1-D operands get a temporary axis; batch dimensions broadcast."""
    a, b = c.t(0), c.t(1)
    ra, rb = c.rank(0), c.rank(1)
    if ra == 1:
        a = tf.expand_dims(a, 0)
    if rb == 1:
        b = tf.expand_dims(b, 1)
    y = tf.linalg.matmul(a, b)
    if ra == 1:
        y = tf.squeeze(y, -2)
    if rb == 1:
        y = tf.squeeze(y, -1)
    return y


@op("Gemm")
def _gemm(c: NodeCtx) -> tf.Tensor:
    """alpha * A' B' + beta * C, with alpha and beta folded into constant operands."""
    alpha, beta = float(c.attr("alpha", 1.0)), float(c.attr("beta", 1.0))
    a = c.t(0)
    if int(c.attr("transA", 0)):
        a = tf.transpose(a)
    kb = c.const(1)
    if kb is not None:
        kb = kb.T if int(c.attr("transB", 0)) else kb
        b = c.env.materialize(np.ascontiguousarray(kb * np.asarray(alpha, kb.dtype) if alpha != 1.0 else kb))
        y = tf.linalg.matmul(a, b)
    else:
        y = tf.linalg.matmul(a, c.t(1), transpose_b=bool(int(c.attr("transB", 0))))
        if alpha != 1.0:
            y = y * alpha
    if c.has(2) and beta != 0.0:
        kc = c.const(2)
        if kc is not None:
            y = y + c.env.materialize(kc * np.asarray(beta, kc.dtype) if beta != 1.0 else kc)
        else:
            y = y + (c.t(2) * beta if beta != 1.0 else c.t(2))
    return y


@op("Einsum")
def _einsum(c: NodeCtx) -> tf.Tensor:
    return tf.einsum(str(c.attr("equation")).replace(" ", ""), *c.ts())


def _coerced(c: NodeCtx, fn: Any) -> tf.Tensor:
    """Softmax before opset 13: flatten to 2-D at ``axis``, apply on the last axis, restore."""
    x, rank = c.t(0), c.rank(0)
    axis = c.axis(int(c.attr("axis", 1)), rank)
    if axis == rank - 1:
        return fn(x, axis=-1)
    shape = tf.shape(x)
    flat = tf.reshape(x, tf.stack([tf.reduce_prod(shape[:axis]), -1]))
    return tf.reshape(fn(flat, axis=-1), shape)


def _softmax_like(fn: Any) -> Any:
    def handler(c: NodeCtx) -> tf.Tensor:
        if c.opset < 13:
            return _coerced(c, fn)
        rank = c.rank(0)
        return fn(c.t(0), axis=c.axis(int(c.attr("axis", -1)), rank))

    return handler


op("Softmax")(_softmax_like(tf.nn.softmax))
op("LogSoftmax")(_softmax_like(tf.nn.log_softmax))


def _reduce_axes(c: NodeCtx, rank: int) -> list[int] | None:
    """Axes to reduce (sorted, non-negative), or None for 'reduce nothing'."""
    if c.has(1):
        axes = [int(a) for a in c.static(1, "axes").reshape(-1)]
    else:
        axes = [int(a) for a in (c.attr("axes") or [])]
    if not axes:
        return None if int(c.attr("noop_with_empty_axes", 0)) else list(range(rank))
    return sorted(c.axis(a, rank) for a in axes)


_REDUCE: dict[str, Any] = {
    "ReduceMean": tf.reduce_mean,
    "ReduceSum": tf.reduce_sum,
    "ReduceMax": tf.reduce_max,
    "ReduceMin": tf.reduce_min,
    "ReduceProd": tf.reduce_prod,
    "ReduceL1": lambda x, axis, keepdims: tf.reduce_sum(tf.abs(x), axis, keepdims),
    "ReduceL2": lambda x, axis, keepdims: tf.sqrt(tf.reduce_sum(x * x, axis, keepdims)),
    "ReduceSumSquare": lambda x, axis, keepdims: tf.reduce_sum(x * x, axis, keepdims),
    "ReduceLogSum": lambda x, axis, keepdims: tf.math.log(tf.reduce_sum(x, axis, keepdims)),
    "ReduceLogSumExp": lambda x, axis, keepdims: tf.reduce_logsumexp(x, axis, keepdims),
}


def _reduce(fn: Any) -> Any:
    def handler(c: NodeCtx) -> Any:
        rank = c.rank(0)
        axes = _reduce_axes(c, rank)
        if axes is None:
            return c.value(0)
        keep = bool(int(c.attr("keepdims", 1)))
        if c.is_cl(0):
            cl_axes = sorted(TO_NHWC.index(a) for a in axes)
            rest = [TO_NHWC[j] for j in range(4) if j not in cl_axes]
            if keep or rest == sorted(rest):  # without keepdims, NHWC order must equal NCHW order
                y = fn(c.cl(0), axis=cl_axes, keepdims=keep)
                return ChannelsLast(y) if keep else y
        return fn(c.t(0), axis=axes, keepdims=keep)

    return handler


for _name, _fn in _REDUCE.items():
    op(_name)(_reduce(_fn))


def _arg(fn: Any) -> Any:
    def handler(c: NodeCtx) -> tf.Tensor:
        x, rank = c.t(0), c.rank(0)
        axis = c.axis(int(c.attr("axis", 0)), rank)
        if int(c.attr("select_last_index", 0)):
            dim = tf.shape(x, out_type=tf.int64)[axis]
            y = dim - 1 - fn(tf.reverse(x, [axis]), axis=axis, output_type=tf.int64)
        else:
            y = fn(x, axis=axis, output_type=tf.int64)
        return tf.expand_dims(y, axis) if int(c.attr("keepdims", 1)) else y

    return handler


op("ArgMax")(_arg(tf.argmax))
op("ArgMin")(_arg(tf.argmin))


@op("TopK")
def _topk(c: NodeCtx) -> tuple[tf.Tensor, tf.Tensor]:
    x, rank = c.t(0), c.rank(0)
    k = int(np.asarray(c.static(1, "k")).reshape(-1)[0]) if c.opset >= 10 else int(c.attr("k"))
    axis = c.axis(int(c.attr("axis", -1)), rank)
    largest = bool(int(c.attr("largest", 1)))
    perm = list(range(rank))
    if axis != rank - 1:
        perm[axis], perm[-1] = perm[-1], perm[axis]
        x = tf.transpose(x, perm)
    vals, idx = tf.math.top_k(x if largest else -x, k=k, sorted=True)
    vals = vals if largest else -vals
    idx = tf.cast(idx, tf.int64)
    if axis != rank - 1:
        vals, idx = tf.transpose(vals, perm), tf.transpose(idx, perm)
    return vals, idx


@op("CumSum")
def _cumsum(c: NodeCtx) -> tf.Tensor:
    x, rank = c.t(0), c.rank(0)
    axis = c.axis(int(np.asarray(c.static(1, "axis")).reshape(-1)[0]), rank)
    return tf.math.cumsum(
        x, axis=axis, exclusive=bool(int(c.attr("exclusive", 0))), reverse=bool(int(c.attr("reverse", 0)))
    )
