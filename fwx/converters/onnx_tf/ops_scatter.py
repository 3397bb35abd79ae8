"""Element-indexed ops: GatherElements, ScatterElements, ScatterND, NonZero, OneHot.

Hugging Face models emit them for position ids, cache updates and masks, and
detection heads for box selection. Each is written with TFLite builtins
(GATHER_ND, SCATTER_ND, WHERE, ONE_HOT), not TF-only kernels,
so the SavedModel they land in still converts to TFLite without Flex ops.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from fwx.converters.onnx_tf.context import NodeCtx
from fwx.converters.onnx_tf.table import op


def _wrap(idx: tf.Tensor, size: Any) -> tf.Tensor:
    """ONNX indices may be negative (count from the end)."""
    idx = tf.cast(idx, tf.int64)
    return tf.where(idx < 0, idx + tf.cast(size, tf.int64), idx)


@op("GatherElements")
def _gather_elements(c: NodeCtx) -> tf.Tensor:
    """``out[i][j][k] = data[i][idx[i][j][k]][k]`` (axis 1): every element's coordinates, one GATHER_ND.

    (A transposed ``gather(batch_dims=)`` is shorter but TFLite's GATHER
    rejects it at prepare time; indices may also be shorter than the data on
    the other axes, which full coordinates handle as they are.)
    """
    rank = c.rank(0)
    axis = c.axis(int(c.attr("axis", 0)), rank)
    data = c.t(0)
    idx = _wrap(c.t(1), tf.shape(data, out_type=tf.int64)[axis])
    return tf.gather_nd(data, _full_coords(idx, axis, rank))


def _full_coords(idx: tf.Tensor, axis: int, rank: int) -> tf.Tensor:
    """Every element's coordinates (``idx.shape + [rank]``) with ``axis`` replaced by ``idx`` itself."""
    shape = tf.shape(idx, out_type=tf.int64)
    grids = tf.meshgrid(*[tf.range(shape[a]) for a in range(rank)], indexing="ij")
    grids[axis] = idx
    return tf.stack(grids, axis=-1)


def _scatter(data: tf.Tensor, coords: tf.Tensor, updates: tf.Tensor, reduction: str, c: NodeCtx) -> tf.Tensor:
    """``data`` with ``updates`` written (or added/multiplied/maxed) at ``coords``, from SCATTER_ND builtins."""
    shape = tf.shape(data, out_type=tf.int64)
    coords = tf.cast(coords, tf.int32)
    shape32 = tf.cast(shape, tf.int32)
    if reduction == "add":
        return data + tf.scatter_nd(coords, updates, shape32)
    hit = tf.scatter_nd(coords, tf.ones_like(updates), shape32) > 0
    if reduction == "none":  # duplicate indices are undefined in ONNX; each position is written once here
        return tf.where(hit, tf.scatter_nd(coords, updates, shape32), data)
    if reduction == "mul":
        # a product of updates per position, through logs would lose signs: only single writes are supported
        return tf.where(hit, data * tf.scatter_nd(coords, updates, shape32), data)
    c.fail(f"reduction {reduction!r} is not supported (none, add and mul are)")
    raise AssertionError  # unreachable: c.fail raises


@op("ScatterElements", "Scatter")
def _scatter_elements(c: NodeCtx) -> tf.Tensor:
    rank = c.rank(0)
    axis = c.axis(int(c.attr("axis", 0)), rank)
    data, updates = c.t(0), c.t(2)
    idx = _wrap(c.t(1), tf.shape(data, out_type=tf.int64)[axis])
    return _scatter(data, _full_coords(idx, axis, rank), updates, str(c.attr("reduction", "none")), c)


@op("ScatterND")
def _scatter_nd(c: NodeCtx) -> tf.Tensor:
    data, idx, updates = c.t(0), c.t(1), c.t(2)
    k = c.shape(1)[-1]
    if k is None:
        c.fail("needs indices whose last axis has a static size")
    dims = tf.shape(data, out_type=tf.int64)[:k]
    idx = tf.cast(idx, tf.int64)
    idx = tf.where(idx < 0, idx + dims, idx)
    return _scatter(data, idx, updates, str(c.attr("reduction", "none")), c)


@op("NonZero")
def _nonzero(c: NodeCtx) -> tf.Tensor:
    """``[rank, count]`` int64 coordinates in row-major order (TF's ``where`` order), count known only at run time."""
    x = c.t(0)
    return tf.transpose(tf.where(tf.not_equal(x, tf.zeros([], x.dtype))))


@op("OneHot")
def _one_hot(c: NodeCtx) -> tf.Tensor:
    depth = tf.cast(tf.reshape(c.t(1), []), tf.int64)
    values = c.t(2)
    idx = tf.cast(c.t(0), tf.int64)
    idx = tf.where(idx < 0, idx + depth, idx)
    rank = c.rank(0)
    axis = int(c.attr("axis", -1))
    axis = axis + rank + 1 if axis < 0 else axis
    return tf.one_hot(
        tf.cast(idx, tf.int32),
        tf.cast(depth, tf.int32),
        on_value=values[1],
        off_value=values[0],
        axis=axis if axis != rank else -1,
    )
