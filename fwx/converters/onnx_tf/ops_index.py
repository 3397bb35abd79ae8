"""Indexing and value-making ops: Gather, Slice, Pad, Cast, Constant, ConstantOfShape, Range, Trilu."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from fwx.converters.onnx_tf.context import TO_NHWC, ChannelsLast, NodeCtx, Partial, np_scalar
from fwx.converters.onnx_tf.ops_shape import dim
from fwx.converters.onnx_tf.table import op

_I32 = 2**31 - 1


def onnx_dtype(code: int) -> tf.DType:
    from onnx import helper

    return tf.as_dtype(np.dtype(helper.tensor_dtype_to_np_dtype(int(code))))


@op("Gather")
def _gather(c: NodeCtx) -> Any:
    rank = c.rank(0)
    axis = c.axis(int(c.attr("axis", 0)), rank)
    idx = c.const(1)
    src = c.known(0)
    if idx is not None and src is not None and rank == 1 and idx.ndim <= 1:
        pos = [int(i) + (len(src) if i < 0 else 0) for i in idx.reshape(-1)]
        return Partial(tf.gather(c.t(0), pos if idx.ndim else pos[0]), idx.ndim, [src[p] for p in pos])
    if idx is not None:
        size = c.shape(0)[axis]
        if (idx < 0).any():
            if size is None:
                ids = tf.constant(idx)
                fixed = tf.where(ids < 0, ids + tf.cast(dim(c, 0, axis), ids.dtype), ids)
                return tf.gather(c.t(0), fixed, axis=axis)
            idx = np.where(idx < 0, idx + size, idx)
        return tf.gather(c.t(0), c.env.materialize(idx), axis=axis)
    ids = c.t(1)
    if ids.dtype.is_unsigned:
        return tf.gather(c.t(0), ids, axis=axis)
    size_t = tf.cast(dim(c, 0, axis), ids.dtype)
    return tf.gather(c.t(0), tf.where(ids < 0, ids + size_t, ids), axis=axis)


@op("GatherND")
def _gather_nd(c: NodeCtx) -> tf.Tensor:
    return tf.gather_nd(c.t(0), c.t(1), batch_dims=int(c.attr("batch_dims", 0)))


def _edge(v: int, step: int, is_start: bool) -> int | None:
    """A slice bound TF can hold in int32; None where ONNX means 'from/to the edge'."""
    if is_start and ((step > 0 and v <= -_I32) or (step < 0 and v >= _I32)):
        return None
    if not is_start and ((step > 0 and v >= _I32) or (step < 0 and v <= -_I32)):
        return None
    return max(-_I32, min(v, _I32))


def _slice_params(c: NodeCtx) -> tuple[Any, Any, list[int], list[int]]:
    rank = c.rank(0)
    if c.opset < 10:
        starts, ends = c.attr("starts"), c.attr("ends")
        axes = c.attr("axes") or list(range(len(starts)))
        return list(starts), list(ends), [c.axis(int(a), rank) for a in axes], [1] * len(starts)
    starts = c.const(1)
    ends = c.const(2)
    n = c.shape(1)[0]
    if n is None and not c.has(3):
        c.fail("needs starts of static length")
    axes = c.static(3, "axes").reshape(-1).tolist() if c.has(3) else list(range(int(n or 0)))
    steps = c.static(4, "steps").reshape(-1).tolist() if c.has(4) else [1] * len(axes)
    return (
        starts.reshape(-1).tolist() if starts is not None else None,
        ends.reshape(-1).tolist() if ends is not None else None,
        [c.axis(int(a), rank) for a in axes],
        [int(s) for s in steps],
    )


@op("Slice")
def _slice(c: NodeCtx) -> Any:
    starts, ends, axes, steps = _slice_params(c)
    rank = c.rank(0)
    if any(s == 0 for s in steps):
        c.fail("a step of 0 is invalid")
    if starts is None or ends is None:
        return _slice_dynamic(c, axes, steps)
    index = [slice(None)] * rank
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        index[a] = slice(_edge(int(s), st, True), _edge(int(e), st, False), st)
    y = c.t(0)[tuple(index)]
    src = c.known(0)
    if src is not None and rank == 1:
        return Partial(y, 1, src[slice(int(starts[0]), int(ends[0]), steps[0])])
    return y


def _slice_dynamic(c: NodeCtx, axes: list[int], steps: list[int]) -> tf.Tensor:
    rank = c.rank(0)

    def bound(i: int) -> tf.Tensor:
        return tf.cast(tf.clip_by_value(tf.cast(c.t(i), tf.int64), -_I32, _I32), tf.int32)

    starts, ends = bound(1), bound(2)
    begin: list[Any] = [0] * rank
    end: list[Any] = [0] * rank
    strides = [1] * rank
    mask = sum(1 << a for a in range(rank) if a not in axes)
    for k, a in enumerate(axes):
        begin[a], end[a], strides[a] = starts[k], ends[k], steps[k]
    return tf.strided_slice(c.t(0), tf.stack(begin), tf.stack(end), strides, begin_mask=mask, end_mask=mask)


@op("Pad")
def _pad(c: NodeCtx) -> Any:
    rank = c.rank(0)
    mode = str(c.attr("mode", "constant")).upper()
    raw = c.static(1, "pads").reshape(-1).tolist() if c.opset >= 11 else list(c.attr("pads"))
    value: Any = c.attr("value", 0.0) if c.opset < 11 else (np_scalar(c.static(2, "value")) if c.has(2) else 0)
    axes = c.static(3, "axes").reshape(-1).tolist() if c.has(3) else list(range(rank))
    axes = [c.axis(int(a), rank) for a in axes]
    pads = [[0, 0] for _ in range(rank)]
    for k, a in enumerate(axes):
        pads[a] = [int(raw[k]), int(raw[k + len(axes)])]
    if any(p < 0 for pair in pads for p in pair):
        c.fail("negative pads are not supported")
    if mode not in ("CONSTANT", "REFLECT"):
        c.fail(f"mode {mode.lower()!r} is not supported (constant and reflect are)")
    if c.is_cl(0):
        cl_pads = [pads[a] for a in TO_NHWC]
        return ChannelsLast(tf.pad(c.cl(0), cl_pads, mode, constant_values=value if mode == "CONSTANT" else 0))
    return tf.pad(c.t(0), pads, mode, constant_values=value if mode == "CONSTANT" else 0)


def _cast_to(c: NodeCtx, dtype: tf.DType) -> Any:
    v = c.value(0)
    if isinstance(v, ChannelsLast):
        return ChannelsLast(tf.cast(v.t, dtype))
    y = tf.cast(c.t(0), dtype)
    src = c.known(0)
    if src is not None and dtype.is_integer:
        return Partial(y, c.rank(0), src)
    return y


@op("Cast")
def _cast(c: NodeCtx) -> Any:
    return _cast_to(c, onnx_dtype(int(c.attr("to"))))


@op("CastLike")
def _cast_like(c: NodeCtx) -> Any:
    return _cast_to(c, c.dtype(1))


@op("Constant")
def _constant(c: NodeCtx) -> np.ndarray:
    a = c.node.attrs
    if "value" in a:
        return np.asarray(a["value"])
    for key, dtype in (
        ("value_float", np.float32),
        ("value_floats", np.float32),
        ("value_int", np.int64),
        ("value_ints", np.int64),
    ):
        if key in a:
            return np.asarray(a[key], dtype)
    return c.fail("only tensor, float(s) and int(s) constants are supported")


@op("ConstantOfShape")
def _constant_of_shape(c: NodeCtx) -> tf.Tensor:
    value = c.attr("value")
    fill = np.asarray(value).reshape(-1)[0] if value is not None else np.float32(0)
    return tf.fill(tf.cast(c.t(0), tf.int64), tf.constant(fill))


@op("Range")
def _range(c: NodeCtx) -> tf.Tensor:
    start = c.t(0)
    return tf.range(start, tf.cast(c.t(1), start.dtype), tf.cast(c.t(2), start.dtype))


@op("Trilu")
def _trilu(c: NodeCtx) -> tf.Tensor:
    x = c.t(0)
    k = tf.cast(c.t(1), tf.int64) if c.has(1) else tf.constant(0, tf.int64)
    rows = tf.range(tf.cast(dim(c, 0, c.rank(0) - 2), tf.int64))[:, None]
    cols = tf.range(tf.cast(dim(c, 0, c.rank(0) - 1), tf.int64))[None, :]
    keep = cols - rows >= k if int(c.attr("upper", 1)) else cols - rows <= k
    return tf.where(keep, x, tf.zeros_like(x))
