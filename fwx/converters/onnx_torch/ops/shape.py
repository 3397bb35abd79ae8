"""Shape ops: Shape, Size, Reshape, Flatten, Squeeze/Unsqueeze, Concat, Expand, Tile, ConstantOfShape, Range.

These are where dynamic dims are kept or lost. ``Shape`` yields ``x.size(i)``
items, the ops below pass items through as Python ints / fx int nodes, and
Reshape/Expand/ConstantOfShape take them as ``List[int]`` sizes, so neither
TorchScript nor torch.export sees a baked sample size.
"""

from __future__ import annotations

import operator

import numpy as np
import torch

from fwx.converters.onnx_torch import graph_fns as gf
from fwx.converters.onnx_torch.builder import GraphBuilder
from fwx.converters.onnx_torch.ops.registry import OnnxNode, op
from fwx.converters.onnx_torch.values import Const, Dyn, Item, Sym, Value, as_items, dtype_of, moved


def size_items(b: GraphBuilder, x: Value) -> list[Item]:
    """The shape of ``x`` as items: ints where known, ``x.size(i)`` nodes otherwise."""
    if isinstance(x, Dyn):
        return [b.size(x, i) for i in range(x.example.dim())]
    if isinstance(x, Const):
        return [int(s) for s in x.value.shape]
    return list(x.dims)


def axes_of(b: GraphBuilder, n: OnnxNode, input_index: int, since: int) -> list[int] | None:
    """Axes from the attribute (before ``since``) or from input ``input_index`` (from ``since`` on)."""
    if n.opset < since:
        axes = n.attr("axes")
        return None if axes is None else [int(a) for a in axes]
    return n.const_ints(input_index)


@op("Shape")
def _shape(b: GraphBuilder, n: OnnxNode) -> Value:
    items = size_items(b, n.need(0))
    start, end = int(n.attr("start", 0)), n.attr("end")
    return b.sym(items[start : None if end is None else int(end)])


@op("Size")
def _size(b: GraphBuilder, n: OnnxNode) -> Value:
    items = size_items(b, n.need(0))
    total: Item = 1
    for item in items:
        total = b.int_op(operator.mul, total, item)
    return b.sym([total], scalar=True)


@op("Reshape")
def _reshape(b: GraphBuilder, n: OnnxNode) -> Value:
    x, shape = n.need(0), n.need(1)
    allowzero = bool(n.attr("allowzero", 0))
    got = as_items(shape, limit=1 << 16)
    if got is None:
        return b.call(gf.reshape, x, shape, allowzero)
    sizes = size_items(b, x) if not allowzero and any(isinstance(s, int) and s == 0 for s in got[0]) else []
    target = [sizes[i] if isinstance(s, int) and s == 0 and not allowzero else s for i, s in enumerate(got[0])]
    ints = [s for s in target if isinstance(s, int)]
    if isinstance(x, Sym) and len(ints) == len(target):  # F.pad's list viewed as [-1, 2], and back
        return moved(x, lambda idx: idx.reshape(ints))
    if isinstance(x, Sym) and len(target) <= 1:
        return Sym(x.items, len(target) == 0, x.dtype)
    return b.call(torch.reshape, x, target)


@op("Flatten")
def _flatten(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.need(0)
    axis = int(n.attr("axis", 1))
    return b.call(gf.flatten, x, axis + b.rank(x) if axis < 0 else axis)


@op("Squeeze")
def _squeeze(b: GraphBuilder, n: OnnxNode) -> Value:
    x, axes = n.need(0), axes_of(b, n, 1, 13)
    if isinstance(x, Sym):
        return moved(x, lambda idx: np.squeeze(idx, axis=None if axes is None else tuple(axes)))
    if axes is None:
        return b.call(torch.squeeze, x)
    rank = b.rank(x)
    return b.call(torch.squeeze, x, [a + rank if a < 0 else a for a in axes])


@op("Unsqueeze")
def _unsqueeze(b: GraphBuilder, n: OnnxNode) -> Value:
    x, axes = n.need(0), axes_of(b, n, 1, 13) or []
    if isinstance(x, Sym):
        return moved(x, lambda idx: np.expand_dims(idx, tuple(axes)))
    out_rank = b.rank(x) + len(axes)
    for a in sorted(a + out_rank if a < 0 else a for a in axes):
        x = b.call(torch.unsqueeze, x, a)
    return x


@op("Concat")
def _concat(b: GraphBuilder, n: OnnxNode) -> Value:
    parts = [v for v in n.inputs if v is not None]
    if any(isinstance(v, Sym) for v in parts):
        got = [as_items(v) for v in parts]
        if all(g is not None and not g[1] for g in got):
            items = [i for g in got if g is not None for i in g[0]]
            return b.sym(items, dtype=dtype_of(next(v for v in parts if isinstance(v, Sym))))
    return b.call(torch.cat, parts, int(n.attr("axis", 0)))


@op("Expand")
def _expand(b: GraphBuilder, n: OnnxNode) -> Value:
    x, shape = n.need(0), n.need(1)
    got = as_items(shape, limit=1 << 16)
    if got is None:
        return b.call(gf.expand, x, shape)
    items, rank = got[0], b.rank(x)
    width = max(len(items), rank)
    pad: list[Item] = [1] * (width - len(items))
    items = pad + items
    # A 1 in the target keeps x's own size (ONNX broadcasts both ways); -1 says so to torch.
    target: list[Item] = [-1 if isinstance(s, int) and s == 1 and i >= width - rank else s for i, s in enumerate(items)]
    return b.method("expand", x, target)


@op("Tile")
def _tile(b: GraphBuilder, n: OnnxNode) -> Value:
    x, reps = n.need(0), n.need(1)
    got = as_items(reps)
    if got is None:
        return b.call(gf.tile, x, reps)
    return b.method("repeat", x, got[0])


@op("ConstantOfShape")
def _constant_of_shape(b: GraphBuilder, n: OnnxNode) -> Value:
    value = n.attr("value")
    value = torch.zeros(1, dtype=torch.float32) if value is None else value
    got = as_items(n.need(0), limit=1 << 16)
    if got is None:
        return b.call(gf.constant_of_shape, n.need(0), Const(value.reshape(-1)))
    return b.call(torch.full, got[0], value.reshape(-1)[0].item(), dtype=value.dtype)


@op("Range")
def _range(b: GraphBuilder, n: OnnxNode) -> Value:
    start, limit, delta = n.need(0), n.need(1), n.need(2)
    dtype = dtype_of(start)
    if dtype.is_floating_point and not all(isinstance(v, Const) for v in (start, limit, delta)):
        return b.call(gf.arange, start, limit, delta)
    if dtype.is_floating_point:
        s, e, d = (float(v.value) for v in (start, limit, delta))  # type: ignore[union-attr]
        return b.call(torch.arange, s, e, d, dtype=dtype)
    return b.call(torch.arange, b.item_of_tensor(start), b.item_of_tensor(limit), b.item_of_tensor(delta), dtype=dtype)
