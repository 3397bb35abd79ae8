"""Neural-network ops: Conv, pooling, normalisation, MatMul/Gemm, Softmax."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import onnx
import torch
import torch.nn.functional as F  # noqa: N812

from fwx.converters.onnx_torch import graph_fns as gf
from fwx.converters.onnx_torch.builder import GraphBuilder
from fwx.converters.onnx_torch.ops.registry import OnnxNode, attr_of, op
from fwx.converters.onnx_torch.values import Const, Item, Value

CONV: dict[int, Callable[..., Any]] = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONV_T: dict[int, Callable[..., Any]] = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
MAX_POOL: dict[int, Callable[..., Any]] = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
AVG_POOL: dict[int, Callable[..., Any]] = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


def _ints(n: OnnxNode, name: str, default: list[int]) -> list[int]:
    v = n.attr(name)
    return [int(x) for x in v] if v else default


def _torch_pads(begin: list[int], end: list[int]) -> list[Item]:
    """ONNX [b1..bn, e1..en] -> F.pad's last-axis-first pairs."""
    out: list[Item] = []
    for b_, e_ in zip(reversed(begin), reversed(end), strict=True):
        out += [b_, e_]
    return out


def _explicit_pads(
    n: OnnxNode, kernel: list[int], strides: list[int], dil: list[int]
) -> tuple[list[int], list[int]] | None:
    """(begin, end) pads known at build time, or None when auto_pad needs the input size."""
    sp = len(kernel)
    auto = str(n.attr("auto_pad", "NOTSET"))
    if auto == "VALID":
        return [0] * sp, [0] * sp
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        if any(s != 1 for s in strides):
            return None
        total = [(k - 1) * d for k, d in zip(kernel, dil, strict=True)]
        small = [t // 2 for t in total]
        big = [t - s for t, s in zip(total, small, strict=True)]
        return (small, big) if auto == "SAME_UPPER" else (big, small)
    pads = _ints(n, "pads", [0] * (2 * sp))
    return pads[:sp], pads[sp:]


def _pad_input(
    b: GraphBuilder,
    n: OnnxNode,
    x: Value,
    kernel: list[int],
    strides: list[int],
    dil: list[int],
    value: float,
    torch_limit: bool,
) -> tuple[Value, list[int]]:
    """Apply what torch's symmetric ``padding=`` cannot express; return (input, padding for torch)."""
    sp = len(kernel)
    pads = _explicit_pads(n, kernel, strides, dil)
    if pads is None:
        upper = str(n.attr("auto_pad")) == "SAME_UPPER"
        return b.call(gf.pad_same, x, kernel, strides, dil, upper, value), [0] * sp
    begin, end = pads
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dil, strict=True)]
    if begin == end and (not torch_limit or all(p <= e // 2 for p, e in zip(begin, eff, strict=True))):
        return x, begin
    return b.call(F.pad, x, _torch_pads(begin, end), "constant", value), [0] * sp


def _check_conv_transpose(node: onnx.NodeProto, opset: int) -> str | None:
    if attr_of(node, "output_shape"):
        return "output_shape"
    if str(attr_of(node, "auto_pad", "NOTSET")) not in ("NOTSET", "VALID"):
        return "auto_pad=SAME"
    pads = list(attr_of(node, "pads", []) or [])
    if pads and pads[: len(pads) // 2] != pads[len(pads) // 2 :]:
        return "asymmetric pads"
    return None


@op("Conv")
def _conv(b: GraphBuilder, n: OnnxNode) -> Value:
    x, w, bias = n.need(0), n.need(1), n.input(2)
    sp = b.rank(x) - 2
    kernel = _ints(n, "kernel_shape", [int(s) for s in b.example(w).shape[2:]])
    strides, dil = _ints(n, "strides", [1] * sp), _ints(n, "dilations", [1] * sp)
    x, padding = _pad_input(b, n, x, kernel, strides, dil, 0.0, torch_limit=False)
    return b.call(CONV[sp], x, w, bias, strides, padding, dil, int(n.attr("group", 1)))


@op("ConvTranspose", check=_check_conv_transpose)
def _conv_transpose(b: GraphBuilder, n: OnnxNode) -> Value:
    x, w, bias = n.need(0), n.need(1), n.input(2)
    sp = b.rank(x) - 2
    strides, dil = _ints(n, "strides", [1] * sp), _ints(n, "dilations", [1] * sp)
    pads = _ints(n, "pads", [0] * (2 * sp))[:sp]
    out_pad = _ints(n, "output_padding", [0] * sp)
    return b.call(CONV_T[sp], x, w, bias, strides, pads, out_pad, int(n.attr("group", 1)), dil)


def _check_pool(node: onnx.NodeProto, opset: int) -> str | None:
    if node.op_type == "MaxPool" and len(node.output) > 1 and node.output[1]:
        return "Indices output"
    if node.op_type == "AveragePool" and any(d != 1 for d in attr_of(node, "dilations", []) or []):
        return "dilations"
    return None


@op("MaxPool", check=_check_pool)
def _max_pool(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.need(0)
    kernel = _ints(n, "kernel_shape", [])
    sp = len(kernel)
    strides, dil = _ints(n, "strides", [1] * sp), _ints(n, "dilations", [1] * sp)
    x, padding = _pad_input(b, n, x, kernel, strides, dil, float("-inf"), torch_limit=True)
    return b.call(MAX_POOL[sp], x, kernel, strides, padding, dil, bool(n.attr("ceil_mode", 0)))


@op("AveragePool", check=_check_pool)
def _avg_pool(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.need(0)
    kernel = _ints(n, "kernel_shape", [])
    sp = len(kernel)
    strides, dil = _ints(n, "strides", [1] * sp), [1] * sp
    ceil_mode, include = bool(n.attr("ceil_mode", 0)), bool(n.attr("count_include_pad", 0))
    pads = _explicit_pads(n, kernel, strides, dil)
    if pads is not None and pads[0] == pads[1] and all(p <= k // 2 for p, k in zip(pads[0], kernel, strict=True)):
        return b.call(AVG_POOL[sp], x, kernel, strides, pads[0], ceil_mode, include)
    xp, _ = _pad_input(b, n, x, kernel, strides, dil, 0.0, torch_limit=True)
    if include or pads is not None and not any(pads[0] + pads[1]):
        return b.call(AVG_POOL[sp], xp, kernel, strides, 0, ceil_mode, True)
    ones, _ = _pad_input(b, n, b.call(gf.pool_ones, x), kernel, strides, dil, 0.0, torch_limit=True)
    return b.call(gf.avg_pool_exclude_pad, xp, ones, kernel, strides, ceil_mode)


@op("DepthToSpace", "SpaceToDepth")
def _depth_space(b: GraphBuilder, n: OnnxNode) -> Value:
    block = int(n.attr("blocksize"))
    if n.op_type == "SpaceToDepth":
        return b.call(gf.space_to_depth, n.need(0), block)
    return b.call(gf.depth_to_space, n.need(0), block, str(n.attr("mode", "DCR")) == "CRD")


@op("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.need(0)
    dims = list(range(2, b.rank(x)))
    if n.op_type == "GlobalAveragePool":
        return b.call(torch.mean, x, dims, keepdim=True)
    return b.call(torch.amax, x, dims, keepdim=True)


def _check_bn(node: onnx.NodeProto, opset: int) -> str | None:
    if attr_of(node, "training_mode", 0):
        return "training_mode=1"
    if opset < 9 and attr_of(node, "spatial", 1) == 0:
        return "spatial=0"
    return None


@op("BatchNormalization", check=_check_bn)
def _batch_norm(b: GraphBuilder, n: OnnxNode) -> Value:
    x, scale, bias, mean, var = (n.need(i) for i in range(5))
    return b.call(F.batch_norm, x, mean, var, scale, bias, False, 0.0, float(n.attr("epsilon", 1e-5)))


@op("InstanceNormalization")
def _instance_norm(b: GraphBuilder, n: OnnxNode) -> Value:
    x, scale, bias = n.need(0), n.need(1), n.need(2)
    return b.call(F.instance_norm, x, None, None, scale, bias, True, 0.0, float(n.attr("epsilon", 1e-5)))


def _check_ln(node: onnx.NodeProto, opset: int) -> str | None:
    return "Mean/InvStdDev outputs" if any(node.output[1:]) else None


@op("LayerNormalization", check=_check_ln)
def _layer_norm(b: GraphBuilder, n: OnnxNode) -> Value:
    x, scale, bias = n.need(0), n.input(1), n.input(2)
    rank, eps = b.rank(x), float(n.attr("epsilon", 1e-5))
    axis = int(n.attr("axis", -1))
    axis = axis + rank if axis < 0 else axis
    shape = list(scale.value.shape) if isinstance(scale, Const) else []
    bias_ok = bias is None or isinstance(bias, Const) and list(bias.value.shape) == shape
    if len(shape) == rank - axis and 1 not in shape and bias_ok:
        # The scale has the full normalised shape, so those dims are static: plain F.layer_norm.
        return b.call(F.layer_norm, x, shape, scale, bias, eps)
    return b.call(gf.layer_norm, x, axis, scale, bias, eps)


@op("MatMul")
def _matmul(b: GraphBuilder, n: OnnxNode) -> Value:
    return b.call(torch.matmul, n.need(0), n.need(1))


@op("Gemm")
def _gemm(b: GraphBuilder, n: OnnxNode) -> Value:
    a, w, c = n.need(0), n.need(1), n.input(2)
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    if n.attr("transA", 0):
        a = b.method("t", a)
    if n.attr("transB", 0) and alpha == 1.0 and beta == 1.0 and (c is None or b.rank(c) == 1):
        return b.call(F.linear, a, w, c)
    y = b.call(torch.matmul, a, b.method("t", w) if n.attr("transB", 0) else w)
    if alpha != 1.0:
        y = b.call(torch.mul, y, alpha)
    if c is not None and beta != 0.0:
        y = b.call(torch.add, y, c if beta == 1.0 else b.call(torch.mul, c, beta))
    return y


@op("Softmax", "LogSoftmax")
def _softmax(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.need(0)
    log, rank = n.op_type == "LogSoftmax", b.rank(x)
    axis = int(n.attr("axis", -1 if n.opset >= 13 else 1))
    axis = axis + rank if axis < 0 else axis
    if n.opset < 13 and axis != rank - 1:
        return b.call(gf.softmax_2d, x, axis, log)
    return b.call(torch.log_softmax if log else torch.softmax, x, axis)
