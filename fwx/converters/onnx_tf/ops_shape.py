"""Shape ops: Shape, Reshape, Flatten, (Un)Squeeze, Transpose, Expand, Tile, Concat, Split.

Exporters compute target shapes at run time (``Shape -> Gather -> Concat ->
Reshape``). These handlers emit ``tf.shape`` for the dynamic parts and return
``Partial`` values that carry the parts known now, so a chain over static
dimensions folds to a constant and a dynamic one keeps its static dims.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from fwx.converters.onnx_tf.context import TO_NCHW, TO_NHWC, ChannelsLast, NodeCtx, Partial
from fwx.converters.onnx_tf.table import op


def runtime_shape(c: NodeCtx, i: int) -> tf.Tensor:
    """int64 shape of input ``i`` in ONNX layout, without transposing a channels-last tensor."""
    if c.is_cl(i):
        return tf.gather(tf.shape(c.cl(i), out_type=tf.int64), TO_NCHW)
    return tf.shape(c.t(i), out_type=tf.int64)


def dim(c: NodeCtx, i: int, a: int) -> Any:
    """Dimension ``a`` of input ``i``: an int when static, else a scalar int64 tensor."""
    d = c.shape(i)[a]
    return d if d is not None else runtime_shape(c, i)[a]


def stack_dims(dims: list[Any]) -> Any:
    """A shape vector from ints and scalar tensors (a plain list when all are ints)."""
    if all(isinstance(d, int) for d in dims):
        return dims
    return tf.stack([tf.cast(d, tf.int64) if isinstance(d, tf.Tensor) else tf.constant(d, tf.int64) for d in dims])


def _prod(dims: list[int | None]) -> int:
    return int(np.prod([int(d or 0) for d in dims]))


def _clamp(v: int, n: int) -> int:
    return max(0, min(v + n if v < 0 else v, n))


@op("Shape")
def _shape(c: NodeCtx) -> Any:
    dims = c.shape(0)
    rank = len(dims)
    end = c.attr("end")
    start, stop = _clamp(int(c.attr("start", 0)), rank), rank if end is None else _clamp(int(end), rank)
    sel = dims[start:stop]
    if all(d is not None for d in sel):
        return np.asarray(sel, np.int64)
    return Partial(runtime_shape(c, 0)[start:stop], 1, sel)


@op("Size")
def _size(c: NodeCtx) -> Any:
    dims = c.shape(0)
    if all(d is not None for d in dims):
        return np.asarray(_prod(dims), np.int64)
    return tf.reduce_prod(runtime_shape(c, 0))


def _reshape_target(c: NodeCtx, known: list[int | None], allowzero: bool) -> list[Any]:
    """Mixed int/tensor target with ONNX's 0 ("copy this input dim") resolved."""
    shape_t = c.t(1) if any(k is None for k in known) else None
    out: list[Any] = []
    for j, k in enumerate(known):
        if k == 0 and not allowzero:
            out.append(dim(c, 0, j))
        elif k is None:
            out.append(shape_t[j] if shape_t is not None else -1)
        else:
            out.append(k)
    return out


@op("Reshape")
def _reshape(c: NodeCtx) -> Any:
    allowzero = bool(int(c.attr("allowzero", 0)))
    known = c.known(1)
    x = c.t(0)
    if known is None:
        shape = c.t(1)
        if not allowzero:
            pad = tf.concat([tf.shape(x, out_type=shape.dtype), tf.zeros([tf.size(shape)], shape.dtype)], 0)
            shape = tf.where(tf.equal(shape, 0), pad[: tf.size(shape)], shape)
        return tf.reshape(x, shape)
    target = _reshape_target(c, known, allowzero)
    y = tf.reshape(x, stack_dims(target))
    y.set_shape([t if isinstance(t, int) and t >= 0 else None for t in target])
    src = c.known(0)
    if src is not None and len(target) <= 1 and c.rank(0) <= 1:
        return Partial(y, len(target), src)
    return y


@op("Flatten")
def _flatten(c: NodeCtx) -> tf.Tensor:
    dims, rank = c.shape(0), c.rank(0)
    axis = int(c.attr("axis", 1))
    axis = axis + rank if axis < 0 else axis
    head, tail = dims[:axis], dims[axis:]
    if all(d is not None for d in tail):
        target: Any = [-1, _prod(tail)] if axis else [1, -1]
    elif all(d is not None for d in head):
        target = [_prod(head), -1]
    else:
        s = runtime_shape(c, 0)
        target = tf.stack([tf.reduce_prod(s[:axis]), tf.reduce_prod(s[axis:])])
    return tf.reshape(c.t(0), target)


def _axes(c: NodeCtx) -> list[int] | None:
    raw = c.static(1, "axes").reshape(-1).tolist() if c.has(1) else c.attr("axes")
    return None if raw is None else [int(a) for a in raw]


@op("Unsqueeze")
def _unsqueeze(c: NodeCtx) -> Any:
    rank, raw = c.rank(0), _axes(c) or []
    axes = sorted(c.axis(a, rank + len(raw)) for a in raw)
    y = c.t(0)
    for a in axes:
        y = tf.expand_dims(y, a)
    src = c.known(0)
    if src is not None and rank == 0 and axes == [0]:
        return Partial(y, 1, src)
    return y


def _drop_axes(c: NodeCtx, dims: list[int | None], axes: list[int]) -> tf.Tensor:
    """Squeeze as a reshape: TFLite's converter mis-folds SQUEEZE after a 5-D TRANSPOSE."""
    kept = [d for i, d in enumerate(dims) if i not in axes]
    unknown = [i for i, d in enumerate(dims) if i not in axes and d is None]
    if len(unknown) <= 1:
        return tf.reshape(c.t(0), [-1 if d is None else d for d in kept])
    return tf.reshape(c.t(0), stack_dims([dim(c, 0, i) for i in range(len(dims)) if i not in axes]))


@op("Squeeze")
def _squeeze(c: NodeCtx) -> Any:
    dims = c.shape(0)
    raw = _axes(c)
    axes = None if raw is None else sorted(c.axis(a, len(dims)) for a in raw)
    if axes is None:
        if any(d is None for d in dims):
            c.fail("needs explicit axes when some dimensions are dynamic")
        axes = [i for i, d in enumerate(dims) if d == 1]
    y = _drop_axes(c, dims, axes) if axes else c.t(0)
    src = c.known(0)
    if src is not None and len(dims) == 1 and axes == [0]:
        return Partial(y, 0, src)
    return y


@op("Transpose")
def _transpose(c: NodeCtx) -> Any:
    rank = c.rank(0)
    perm = [int(p) for p in (c.attr("perm") or list(range(rank))[::-1])]
    if c.is_cl(0):
        composed = [TO_NCHW[p] for p in perm]
        return c.cl(0) if composed == list(range(4)) else tf.transpose(c.cl(0), composed)
    return tf.transpose(c.t(0), perm)


@op("Expand")
def _expand(c: NodeCtx) -> tf.Tensor:
    """Bidirectional broadcast: the result is broadcast(shape(x), shape)."""
    x = c.t(0)
    known, xs = c.known(1), c.shape(0)
    if known is not None and all(k is not None for k in known) and all(d is not None for d in xs):
        return tf.broadcast_to(
            x, np.broadcast_shapes(tuple(int(d or 0) for d in xs), tuple(int(k or 0) for k in known))
        )
    shape = tf.cast(c.t(1), tf.int64)
    y = tf.broadcast_to(x, tf.broadcast_dynamic_shape(tf.shape(x, out_type=tf.int64), shape))
    n = c.shape(1)[0]
    if n is not None:
        y.set_shape([None] * max(int(n), len(xs)))
    return y


@op("Tile")
def _tile(c: NodeCtx) -> tf.Tensor:
    return tf.tile(c.t(0), c.t(1))


@op("Concat")
def _concat(c: NodeCtx) -> Any:
    idx = [i for i in range(c.n_inputs) if c.has(i)]
    rank = max(c.rank(i) for i in idx)
    axis = c.axis(int(c.attr("axis")), rank)
    idx = [i for i in idx if not (c.const(i) is not None and 0 in c.shape(i))]  # drop empty constants
    if rank == 4 and any(c.is_cl(i) for i in idx):
        return ChannelsLast(tf.concat([c.cl(i) for i in idx], TO_NHWC.index(axis)))
    y = tf.concat([c.t(i) for i in idx], axis) if len(idx) > 1 else tf.identity(c.t(idx[0]))
    parts = [c.known(i) for i in idx]
    if rank == 1 and all(p is not None for p in parts):
        return Partial(y, 1, [e for p in parts for e in p or []])
    return y


@op("Split")
def _split(c: NodeCtx) -> list[tf.Tensor]:
    x, dims = c.t(0), c.shape(0)
    axis = c.axis(int(c.attr("axis", 0)), len(dims))
    n = len(c.node.outputs)
    sizes: list[int] | None = None
    if c.has(1):
        sizes = [int(v) for v in c.static(1, "split").reshape(-1)]
    elif c.attr("split") is not None:
        sizes = [int(v) for v in c.attr("split")]
    elif dims[axis] is not None:
        size = int(dims[axis] or 0)
        chunk = -(-size // n)
        sizes = [min(chunk, size - k * chunk) for k in range(n)]
    return list(tf.split(x, sizes if sizes is not None else n, axis=axis))
