"""Data-movement ops: Gather, GatherElements, GatherND, ScatterElements, ScatterND, Slice, Split, Transpose, Pad, Constant, Identity, Dropout, Einsum, CumSum."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

from fwx.converters.onnx_torch import graph_fns as gf
from fwx.converters.onnx_torch.builder import GraphBuilder
from fwx.converters.onnx_torch.ops.registry import OnnxNode, op
from fwx.converters.onnx_torch.values import Const, Item, Sym, Value, as_items, moved

_BIG = 1 << 62


@op("Constant")
def _constant(b: GraphBuilder, n: OnnxNode) -> Value:
    for key, dtype in (
        ("value_float", torch.float32),
        ("value_int", torch.int64),
        ("value_floats", torch.float32),
        ("value_ints", torch.int64),
    ):
        if key in n.attrs:
            return Const(torch.tensor(n.attrs[key], dtype=dtype))
    if "value" not in n.attrs:
        raise n.unsupported("value_string/sparse_value")
    return Const(n.attrs["value"])


@op("Identity")
def _identity(b: GraphBuilder, n: OnnxNode) -> Value:
    return n.need(0)


@op("Dropout")
def _dropout(b: GraphBuilder, n: OnnxNode) -> list[Value]:
    x = n.need(0)
    training = n.const(2) if n.opset >= 12 else None
    if training is not None and bool(training.reshape(-1)[0]):
        raise n.unsupported("training_mode=1")
    if len(n.used) > 1 and n.used[1]:
        return [x, b.call(torch.ones_like, x, dtype=torch.bool)]
    return [x]


@op("Transpose")
def _transpose(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.need(0)
    perm = [int(p) for p in n.attr("perm") or list(range(b.rank(x)))[::-1]]
    if isinstance(x, Sym):
        return moved(x, lambda idx: idx.transpose(perm))
    return b.method("permute", x, perm)


@op("Gather")
def _gather(b: GraphBuilder, n: OnnxNode) -> Value:
    data, idx = n.need(0), n.need(1)
    axis = int(n.attr("axis", 0))
    axis = axis + b.rank(data) if axis < 0 else axis
    if isinstance(data, Sym) and isinstance(idx, Const):
        picks = idx.value.numpy()
        return moved(data, lambda ix: np.take(ix, picks, axis=axis))
    if isinstance(idx, Const) and idx.value.dim() == 0:
        return b.call(torch.select, data, axis, int(idx.value))
    return b.call(gf.gather, data, idx, axis)


@op("GatherElements")
def _gather_elements(b: GraphBuilder, n: OnnxNode) -> Value:
    data = n.need(0)
    axis = int(n.attr("axis", 0))
    return b.call(gf.gather_elements, data, n.need(1), axis + b.rank(data) if axis < 0 else axis)


@op("GatherND")
def _gather_nd(b: GraphBuilder, n: OnnxNode) -> Value:
    return b.call(gf.gather_nd, n.need(0), n.need(1), int(n.attr("batch_dims", 0)))


#: ONNX Scatter* ``reduction`` -> torch's reduce name
_REDUCE = {"none": "none", "add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


def _reduction(n: OnnxNode) -> str:
    red = str(n.attr("reduction", "none"))
    if red not in _REDUCE:
        raise ValueError(f"{n.label}: unknown reduction {red!r}")
    return _REDUCE[red]


@op("ScatterElements", "Scatter")
def _scatter_elements(b: GraphBuilder, n: OnnxNode) -> Value:
    data = n.need(0)
    axis = int(n.attr("axis", 0))
    axis = axis + b.rank(data) if axis < 0 else axis
    return b.call(gf.scatter_elements, data, n.need(1), n.need(2), axis, _reduction(n))


@op("ScatterND")
def _scatter_nd(b: GraphBuilder, n: OnnxNode) -> Value:
    return b.call(gf.scatter_nd, n.need(0), n.need(1), n.need(2), _reduction(n))


def _items(b: GraphBuilder, v: Value | None, default: list[Item]) -> list[Item]:
    if v is None:
        return default
    got = as_items(v)
    if got is not None:
        return got[0]
    count = int(b.example(v).numel())
    return [b.item_of_tensor(b.call(torch.select, v, 0, i)) for i in range(count)]


@op("Slice")
def _slice(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.need(0)
    if n.opset < 10:
        starts: list[Item] = [int(s) for s in n.attr("starts")]
        ends: list[Item] = [int(e) for e in n.attr("ends")]
        axes: list[Item] = [int(a) for a in n.attr("axes", range(len(starts)))]
        steps: list[Item] = [1] * len(starts)
    else:
        starts, ends = _items(b, n.need(1), []), _items(b, n.need(2), [])
        axes = _items(b, n.input(3), list(range(len(starts))))
        steps = _items(b, n.input(4), [1] * len(starts))
    if not all(isinstance(v, int) for v in (*axes, *steps)):
        raise n.unsupported("axes/steps computed at run time")
    rank = b.rank(x)
    if isinstance(x, Sym) and all(isinstance(v, int) for v in (*starts, *ends)):
        key = [slice(None)] * rank
        for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
            assert isinstance(axis, int)
            key[axis] = slice(start, end, step)  # ONNX clamps as Python does, negative steps included
        return moved(x, lambda idx: idx[tuple(key)])
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        assert isinstance(axis, int)
        assert isinstance(step, int)
        if isinstance(start, int) and start == 0 and isinstance(end, int) and end >= _BIG and step == 1:
            continue
        end = min(end, gf.INT64_MAX) if isinstance(end, int) else end
        x = b.call(gf.slice_axis, x, axis + rank if axis < 0 else axis, start, end, step)
    return x


@op("Split")
def _split(b: GraphBuilder, n: OnnxNode) -> list[Value]:
    x = n.need(0)
    axis = int(n.attr("axis", 0))
    axis = axis + b.rank(x) if axis < 0 else axis
    sizes = n.attr("split") if n.opset < 13 else n.const_ints(1)
    count = len(n.outputs)
    if isinstance(x, Sym) and x.grid is None and not x.scalar:  # a shape vector cut into pieces: still sizes
        cuts = [int(s) for s in sizes] if sizes else [len(x.items) // count] * count
        if sum(cuts) == len(x.items):
            starts = [sum(cuts[:i]) for i in range(count)]
            return [b.sym(x.items[s : s + c], False, x.dtype) for s, c in zip(starts, cuts, strict=True)]
    if sizes:
        return b.call_multi(gf.split_sizes, count, x, [int(s) for s in sizes], axis)
    parts = int(n.attr("num_outputs", count))
    return b.call_multi(gf.split_equal, parts, x, parts, axis)


@op("Pad")
def _pad(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.need(0)
    mode = str(n.attr("mode", "constant"))
    if n.opset < 11:
        pads: list[Item] = [int(p) for p in n.attr("pads")]
        value: float = float(n.attr("value", 0.0))
        axes: list[int] | None = None
    else:
        pads = _items(b, n.need(1), [])
        cv = n.const(2)
        value = 0.0 if cv is None or cv.numel() == 0 else cv.reshape(-1)[0].item()
        axes = n.const_ints(3)
    rank = b.rank(x)
    axes = [a + rank if a < 0 else a for a in axes] if axes else list(range(rank))
    half = len(axes)
    begins, ends = dict(zip(axes, pads[:half], strict=True)), dict(zip(axes, pads[half:], strict=True))
    first = min([a for a in axes if not (begins[a] == 0 and ends[a] == 0)], default=rank)
    torch_pads: list[Item] = []
    for a in range(rank - 1, first - 1, -1):  # F.pad lists the last axis first
        torch_pads += [begins.get(a, 0), ends.get(a, 0)]
    if not torch_pads:
        return x
    torch_mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}.get(mode)
    if torch_mode is None:
        raise n.unsupported(f"mode={mode}")
    if torch_mode == "constant":
        return b.call(F.pad, x, torch_pads, "constant", value)
    return b.call(F.pad, x, torch_pads, torch_mode)


@op("Einsum")
def _einsum(b: GraphBuilder, n: OnnxNode) -> Value:
    return b.call(torch.einsum, str(n.attr("equation")), [v for v in n.inputs if v is not None])


@op("CumSum")
def _cumsum(b: GraphBuilder, n: OnnxNode) -> Value:
    x, axis_t = n.need(0), n.const(1)
    axis = int(axis_t.reshape(-1)[0]) if axis_t is not None else 0
    return b.call(gf.cumsum, x, axis, bool(n.attr("exclusive", 0)), bool(n.attr("reverse", 0)))


@op("Trilu")
def _trilu(b: GraphBuilder, n: OnnxNode) -> Value:
    k = n.input(1)
    diag = b.item_of_tensor(k) if k is not None else 0
    return b.call(torch.triu if n.attr("upper", 1) else torch.tril, n.need(0), diag)


@op("TopK")
def _topk(b: GraphBuilder, n: OnnxNode) -> list[Value]:
    x = n.need(0)
    k = b.item_of_tensor(n.need(1)) if n.opset >= 10 else int(n.attr("k"))
    axis = int(n.attr("axis", -1))
    axis = axis + b.rank(x) if axis < 0 else axis
    return b.call_multi(torch.topk, 2, x, k, axis, bool(n.attr("largest", 1)), bool(n.attr("sorted", 1)))
