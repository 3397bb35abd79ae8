"""Reductions (axes as attribute before opset 13/18, as input after) and ArgMax/ArgMin."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch

from fwx.converters.onnx_torch import graph_fns as gf
from fwx.converters.onnx_torch.builder import GraphBuilder
from fwx.converters.onnx_torch.ops.registry import OnnxNode, op
from fwx.converters.onnx_torch.ops.shape import axes_of
from fwx.converters.onnx_torch.values import Item, Sym, Value

#: Opset from which each reduction takes its axes as an input.
AXES_INPUT_SINCE = {"ReduceSum": 13}


REDUCE: dict[str, Callable[..., Any]] = {
    "ReduceMean": torch.mean,
    "ReduceSum": torch.sum,
    "ReduceMax": torch.amax,
    "ReduceMin": torch.amin,
    "ReduceProd": gf.reduce_prod,
    "ReduceLogSumExp": torch.logsumexp,
    "ReduceSumSquare": gf.reduce_sum_square,
    "ReduceL1": gf.reduce_l1,
    "ReduceL2": gf.reduce_l2,
    "ReduceLogSum": gf.reduce_log_sum,
}


@op(*REDUCE)
def _reduce(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.need(0)
    rank = b.rank(x)
    axes = axes_of(b, n, 1, AXES_INPUT_SINCE.get(n.op_type, 18))
    keepdim = bool(n.attr("keepdims", 1))
    if not axes:
        if n.attr("noop_with_empty_axes", 0):
            return x
        axes = list(range(rank))
    dims = sorted(a + rank if a < 0 else a for a in axes)
    if isinstance(x, Sym) and x.grid is None and not x.scalar and n.op_type in _SYM_FOLD:
        # shape arithmetic (tf2onnx's Tensordot: ReduceProd of a Shape slice feeds a Reshape): keep it
        # symbolic, else the Reshape reads a tensor value and torch.export sees a data-dependent size
        fold, start = _SYM_FOLD[n.op_type]
        total: Item = start
        for item in x.items:
            total = b.int_op(fold, total, item)
        return b.sym([total], scalar=not keepdim)
    return b.call(REDUCE[n.op_type], x, dims, keepdim)


_SYM_FOLD: dict[str, tuple[Callable[[Any, Any], Any], int]] = {
    "ReduceProd": (operator.mul, 1),
    "ReduceSum": (operator.add, 0),
}


@op("ArgMax", "ArgMin")
def _arg(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.need(0)
    axis = int(n.attr("axis", 0))
    axis = axis + b.rank(x) if axis < 0 else axis
    keepdim, is_max = bool(n.attr("keepdims", 1)), n.op_type == "ArgMax"
    if n.attr("select_last_index", 0):
        return b.call(gf.arg_last, x, axis, keepdim, is_max)
    return b.call(torch.argmax if is_max else torch.argmin, x, axis, keepdim)
