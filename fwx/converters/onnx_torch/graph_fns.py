"""Small functions the generated graph calls where ONNX and torch semantics differ.

Every function here is typed for TorchScript (``torch.jit.script`` compiles
them from the generated ``forward``) and uses only int arithmetic on sizes, so
``torch.export`` traces them with symbolic sizes. Sizes are read with
``x.size(i)`` at run time, never baked.
"""

from __future__ import annotations

from typing import List, Optional  # noqa: UP035 - TorchScript needs typing.List/Optional

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor

INT64_MAX = 9223372036854775807


def ints_to_tensor(items: List[int]) -> Tensor:  # noqa: UP006
    return torch.tensor(items, dtype=torch.int64)


def int_to_tensor(item: int) -> Tensor:
    return torch.scalar_tensor(item, dtype=torch.int64)


def tensor_to_int(t: Tensor) -> int:
    return int(t.reshape(-1)[0].item())


# ONNX Max/Min over shape values (tf2onnx's broadcast of two shapes, Keras MultiHeadAttention): under
# torch.export ``max(a, b)`` of two sizes would guard on ``a >= b``; torch.sym_max keeps it symbolic.
def size_max(a: int, b: int) -> int:
    if torch.jit.is_scripting():  # type: ignore[attr-defined]
        return max(a, b)
    return _sym_max(a, b)


def size_min(a: int, b: int) -> int:
    if torch.jit.is_scripting():  # type: ignore[attr-defined]
        return min(a, b)
    return _sym_min(a, b)


@torch.jit.unused
def _sym_max(a: int, b: int) -> int:
    return torch.sym_max(a, b)  # type: ignore[return-value]


@torch.jit.unused
def _sym_min(a: int, b: int) -> int:
    return torch.sym_min(a, b)  # type: ignore[return-value]


def tensor_to_ints(t: Tensor) -> List[int]:  # noqa: UP006
    out: List[int] = t.reshape(-1).tolist()  # noqa: UP006
    return out


def div(a: Tensor, b: Tensor) -> Tensor:
    """ONNX Div: true division for floats, truncation toward zero for ints."""
    if a.is_floating_point() or b.is_floating_point():
        return torch.div(a, b)
    return torch.div(a, b, rounding_mode="trunc")


def pow_(a: Tensor, b: Tensor) -> Tensor:
    """ONNX Pow keeps the base's dtype whatever the exponent's."""
    return torch.pow(a, b).to(a.dtype)


def slice_axis(x: Tensor, dim: int, start: int, end: int, step: int) -> Tensor:
    """ONNX Slice on one axis (aten.slice clamps like ONNX for positive steps)."""
    if step > 0:
        return torch.ops.aten.slice(x, dim, start, end, step)
    n = x.size(dim)
    start = start + n if start < 0 else start
    end = end + n if end < 0 else end
    start = max(0, min(start, n - 1))
    end = max(-1, min(end, n - 1))
    return torch.ops.aten.slice(x.flip([dim]), dim, n - 1 - start, n - 1 - end, -step)


def gather(data: Tensor, idx: Tensor, axis: int) -> Tensor:
    """ONNX Gather: out shape = data[:axis] + idx + data[axis+1:], negative indices wrap."""
    idx = torch.where(idx < 0, idx + data.size(axis), idx)
    flat = torch.index_select(data, axis, idx.reshape(-1))
    shape = data.size()[:axis] + idx.size() + data.size()[axis + 1 :]
    return flat.reshape(shape)


def gather_elements(data: Tensor, idx: Tensor, axis: int) -> Tensor:
    idx = torch.where(idx < 0, idx + data.size(axis), idx)
    return torch.gather(data, axis, idx)


def _linear_rows(rows: Tensor, picked: List[int]) -> Tensor:  # noqa: UP006
    """Index rows (last axis ``k`` long, negatives wrapping) as one linear index into ``picked``'s sizes."""
    rows = rows.to(torch.int64)
    lin = torch.zeros_like(rows.select(-1, 0))
    for j in range(len(picked)):
        n = picked[j]
        col = rows.select(-1, j)
        lin = lin * n + torch.where(col < 0, col + n, col)
    return lin


def gather_nd(data: Tensor, idx: Tensor, batch_dims: int) -> Tensor:
    """ONNX GatherND: the last axis of ``idx`` indexes ``k`` axes of ``data`` after the ``batch_dims`` shared ones.

    Flattened to one linear index per row so it is a single advanced-indexing
    gather (no Python loop over rows, so sizes stay symbolic under export).
    """
    k = idx.size(-1)
    size: List[int] = list(data.size())  # noqa: UP006
    lead = size[:batch_dims]
    picked = size[batch_dims : batch_dims + k]
    rest = size[batch_dims + k :]
    nb = 1
    for s in lead:
        nb = nb * s
    span = 1
    for s in picked:
        span = span * s
    flat = data.reshape([nb, span] + rest)
    lin = _linear_rows(idx.reshape([nb, -1, k]), picked)
    batch = torch.arange(nb, device=data.device).reshape([nb, 1]).expand_as(lin)
    out = flat[batch, lin]
    shape: List[int] = list(idx.size())[:-1] + rest  # noqa: UP006
    return out.reshape(shape)


def scatter_elements(data: Tensor, idx: Tensor, updates: Tensor, axis: int, reduce: str) -> Tensor:
    """ONNX ScatterElements (``reduce``: "none", or torch's "sum" / "prod" / "amax" / "amin")."""
    idx = torch.where(idx < 0, idx + data.size(axis), idx)
    if reduce == "none":
        return torch.scatter(data, axis, idx, updates)
    return torch.scatter_reduce(data, axis, idx, updates, reduce, include_self=True)


def scatter_nd(data: Tensor, idx: Tensor, updates: Tensor, reduce: str) -> Tensor:
    """ONNX ScatterND: each row of ``idx`` (its last axis, ``k`` long) names a slice of ``data``'s first ``k``
    axes that the matching slice of ``updates`` replaces (or is reduced into).

    As in ``gather_nd``, rows become one linear index into ``data`` flattened over those ``k`` axes, so it
    is one ``index_copy``/``index_add``/``scatter_reduce`` along axis 0 (no loop over rows).
    """
    k = idx.size(-1)
    size: List[int] = list(data.size())  # noqa: UP006
    picked = size[:k]
    rest = size[k:]
    span = 1
    for s in picked:
        span = span * s
    flat = data.reshape([span] + rest)
    lin = _linear_rows(idx.reshape([-1, k]), picked)
    upd = updates.reshape([-1] + rest)
    if reduce == "none":
        out = flat.index_copy(0, lin, upd)
    elif reduce == "sum":
        out = flat.index_add(0, lin, upd)
    else:  # scatter_reduce, not the beta index_reduce: one index per element of the updates
        view: List[int] = [-1] + [1] * len(rest)  # noqa: UP006
        out = flat.scatter_reduce(0, lin.reshape(view).expand_as(upd), upd, reduce, include_self=True)
    return out.reshape(size)


def expand(x: Tensor, shape_t: Tensor) -> Tensor:
    """ONNX Expand with a shape only known at run time (a 1 keeps x's size: broadcasting both ways)."""
    shape = tensor_to_ints(shape_t)
    n = max(len(shape), x.dim())
    xs = [1] * (n - x.dim()) + list(x.size())
    ss = [1] * (n - len(shape)) + shape
    out: List[int] = []  # noqa: UP006
    for i in range(n):
        out.append(xs[i] if ss[i] == 1 else ss[i])
    return x.expand(out)


def reshape(x: Tensor, shape_t: Tensor, allowzero: bool) -> Tensor:
    """ONNX Reshape with a shape only known at run time (0 copies the input's size)."""
    sizes: List[int] = []  # noqa: UP006
    for i, s in enumerate(tensor_to_ints(shape_t)):
        sizes.append(x.size(i) if s == 0 and not allowzero else s)
    return x.reshape(sizes)


def tile(x: Tensor, reps: Tensor) -> Tensor:
    return x.repeat(tensor_to_ints(reps))


def constant_of_shape(shape_t: Tensor, value: Tensor) -> Tensor:
    return value.reshape(-1)[0].expand(tensor_to_ints(shape_t)).clone()


def cumsum(x: Tensor, axis: int, exclusive: bool, reverse: bool) -> Tensor:
    if reverse:
        x = x.flip([axis])
    out = torch.cumsum(x, axis)
    if exclusive:
        out = out - x
    return out.flip([axis]) if reverse else out


def flatten(x: Tensor, axis: int) -> Tensor:
    if axis == 0:
        return x.reshape(1, -1)
    if axis == x.dim():
        return x.reshape(-1, 1)
    return torch.flatten(torch.flatten(x, axis), 0, axis - 1)


def softmax_2d(x: Tensor, axis: int, log: bool) -> Tensor:
    """Softmax before opset 13: over everything from ``axis`` on, as one flattened row."""
    flat = torch.flatten(x, axis) if axis > 0 else x.reshape(1, -1)
    flat = torch.flatten(flat, 0, axis - 1) if axis > 1 else flat
    out = torch.log_softmax(flat, -1) if log else torch.softmax(flat, -1)
    return out.reshape(x.size())


def pad_same(
    x: Tensor,
    kernel: List[int],  # noqa: UP006
    stride: List[int],  # noqa: UP006
    dilation: List[int],  # noqa: UP006
    upper: bool,
    value: float,
) -> Tensor:
    """auto_pad SAME_UPPER/SAME_LOWER: the padding depends on the input size, so compute it now."""
    n = len(kernel)
    pads: List[int] = []  # noqa: UP006
    for i in range(n - 1, -1, -1):
        size = x.size(x.dim() - n + i)
        eff = (kernel[i] - 1) * dilation[i] + 1
        total = eff - stride[i] + (-size) % stride[i]
        if eff < stride[i]:
            total = max(total, 0)
        small = total // 2
        if upper:
            pads += [small, total - small]
        else:
            pads += [total - small, small]
    return F.pad(x, pads, value=value)


def avg_pool_exclude_pad(
    x: Tensor,
    ones: Tensor,
    kernel: List[int],  # noqa: UP006
    stride: List[int],  # noqa: UP006
    ceil_mode: bool,
) -> Tensor:
    """AveragePool over already padded tensors that does not count padded cells.

    ``ones`` is ``pool_ones`` padded the same way as ``x`` (zeros in the padding).
    """
    n = len(kernel)
    if n == 1:
        s = F.avg_pool1d(x, kernel, stride, 0, ceil_mode, True)
        c = F.avg_pool1d(ones, kernel, stride, 0, ceil_mode, True)
    elif n == 2:
        s = F.avg_pool2d(x, kernel, stride, 0, ceil_mode, True)
        c = F.avg_pool2d(ones, kernel, stride, 0, ceil_mode, True)
    else:
        s = F.avg_pool3d(x, kernel, stride, 0, ceil_mode, True)
        c = F.avg_pool3d(ones, kernel, stride, 0, ceil_mode, True)
    return s / c


def layer_norm(x: Tensor, axis: int, scale: Optional[Tensor], bias: Optional[Tensor], eps: float) -> Tensor:  # noqa: UP045
    """LayerNormalization whose normalised dims are only known at run time."""
    out = F.layer_norm(x, x.size()[axis:], None, None, eps)
    if scale is not None:
        out = out * scale
    if bias is not None:
        out = out + bias
    return out


def pool_ones(x: Tensor) -> Tensor:
    """A one-sample, one-channel tensor of ones shaped like ``x``: counts cells under a pooling window."""
    return torch.ones_like(x[:1, :1])


def reduce_prod(x: Tensor, dims: List[int], keepdim: bool) -> Tensor:  # noqa: UP006
    for i in range(len(dims) - 1, -1, -1):  # dims ascending: reduce the last first
        x = torch.prod(x, dims[i], keepdim)
    return x


def reduce_sum_square(x: Tensor, dims: List[int], keepdim: bool) -> Tensor:  # noqa: UP006
    return torch.sum(x * x, dims, keepdim)


def reduce_l1(x: Tensor, dims: List[int], keepdim: bool) -> Tensor:  # noqa: UP006
    return torch.sum(torch.abs(x), dims, keepdim)


def reduce_l2(x: Tensor, dims: List[int], keepdim: bool) -> Tensor:  # noqa: UP006
    return torch.sqrt(torch.sum(x * x, dims, keepdim))


def reduce_log_sum(x: Tensor, dims: List[int], keepdim: bool) -> Tensor:  # noqa: UP006
    return torch.log(torch.sum(x, dims, keepdim))


def arg_last(x: Tensor, axis: int, keepdim: bool, is_max: bool) -> Tensor:
    """ArgMax/ArgMin with select_last_index=1: search the flipped tensor."""
    flipped = x.flip([axis])
    idx = torch.argmax(flipped, axis, keepdim) if is_max else torch.argmin(flipped, axis, keepdim)
    return x.size(axis) - 1 - idx


def split_equal(x: Tensor, parts: int, axis: int) -> List[Tensor]:  # noqa: UP006
    """Split into ``parts`` near-equal chunks, the last one smaller (ONNX num_outputs)."""
    n = x.size(axis)
    return list(torch.split(x, (n + parts - 1) // parts, axis))


def depth_to_space(x: Tensor, block: int, crd: bool) -> Tensor:
    """ONNX DepthToSpace: CRD is ``pixel_shuffle``; DCR takes the block offset as the major channel index."""
    if crd:
        return F.pixel_shuffle(x, block)
    n, c, h, w = x.shape
    y = x.reshape(n, block, block, c // (block * block), h, w).permute(0, 3, 4, 1, 5, 2)
    return y.reshape(n, c // (block * block), h * block, w * block)


def space_to_depth(x: Tensor, block: int) -> Tensor:
    """ONNX SpaceToDepth: the block offset is the major channel index (DCR order)."""
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // block, block, w // block, block).permute(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * block * block, h // block, w // block)


def split_sizes(x: Tensor, sizes: List[int], axis: int) -> List[Tensor]:  # noqa: UP006
    return list(torch.split(x, sizes, axis))


def hard_sigmoid(x: Tensor, alpha: float, beta: float) -> Tensor:
    return torch.clamp(x * alpha + beta, 0.0, 1.0)


def clip(x: Tensor, lo: float, hi: float) -> Tensor:
    return torch.clamp(x, lo, hi)


def arange(start: Tensor, end: Tensor, step: Tensor) -> Tensor:
    """Range with runtime bounds (only when they are not shape-derived ints)."""
    return torch.arange(start.item(), end.item(), step.item(), dtype=start.dtype)
