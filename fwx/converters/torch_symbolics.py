"""ONNX symbolics the TorchScript-based exporter lacks, for ops real models use.

* ``aten::diff``: Hugging Face's mask helpers (``masking_utils``, to spot packed
  sequences in GPT-2-class decoders without an attention mask) call
  ``torch.diff(position_ids, prepend=...)``; without it a traced GPT-2 has no
  path to ONNX (and so none to SavedModel or TFLite): "Exporting the operator
  'aten::diff' to ONNX opset version 17 is not supported".

* ``aten::cumsum`` of a bool tensor: torch sums it as int64, but the stock
  symbolic writes ``CumSum`` on the bool input, an invalid model (onnxruntime:
  "Type 'tensor(bool)' of input parameter ... of operator (CumSum)"); the same
  mask helpers do ``(diff != 1).cumsum(-1)``. Cast first, as torch does.

* ``aten::embedding_bag`` (``nn.EmbeddingBag``, recommenders' pooled id features) in ``sum`` and
  ``mean`` mode: the stock symbolic writes an ONNX ``Loop`` over the bags, which neither ONNX translator
  nor TFLite takes, so a recommender reached ONNX only. Here each index's bag number is counted from
  the offsets, and the bags are one matrix product of a bag-by-index one-hot with the gathered rows,
  which every format runs (memory: bags x indices). ``max`` mode keeps the stock ``Loop``.

Registered once per process, for every opset the legacy exporter writes (11+).
"""

from __future__ import annotations

from typing import Any

_DONE: set[int] = set()
_INT64_MAX = 9223372036854775807


def register(opset: int) -> None:
    if opset in _DONE:
        return

    from torch.onnx import register_custom_op_symbolic  # type: ignore[attr-defined]

    register_custom_op_symbolic("aten::diff", _diff, opset)
    if opset >= 11:  # CumSum and Range exist from opset 11
        register_custom_op_symbolic("aten::cumsum", _cumsum, opset)
        register_custom_op_symbolic("aten::embedding_bag", _embedding_bag(opset), opset)
    _DONE.add(opset)


def _embedding_bag(opset: int) -> Any:
    """The ``aten::embedding_bag`` symbolic for ``opset`` (``ReduceSum`` takes its axes as an input from 13)."""
    from torch.onnx import symbolic_helper as sh

    @sh.parse_args("v", "v", "v", "i", "i", "i", "v", "i", "i")
    def symbolic(
        g: Any,
        weight: Any,
        indices: Any,
        offsets: Any,
        scale_grad_by_freq: int,
        mode: int,
        sparse: int,
        per_sample_weights: Any,
        include_last_offset: int,
        padding_idx: int,
    ) -> Any:
        if mode not in (0, 1):  # max: a masked max needs bags x indices x width; keep the stock Loop
            return sh._embedding_bag_helper(
                g,
                weight,
                indices,
                offsets,
                scale_grad_by_freq,
                mode,
                sparse,
                per_sample_weights,
                include_last_offset,
                padding_idx,
            )
        return _pooled_bags(
            g, opset, weight, indices, offsets, mode, per_sample_weights, include_last_offset, padding_idx
        )

    return symbolic


def _pooled_bags(
    g: Any,
    opset: int,
    weight: Any,
    indices: Any,
    offsets: Any,
    mode: int,
    per_sample_weights: Any,
    include_last_offset: int,
    padding_idx: int | None,
) -> tuple[Any, None, None, None]:
    """``out[b] = sum_i onehot[b, i] * w_i * weight[indices[i]]`` (divided by the bag's size for ``mean``),
    where ``onehot[b, i]`` says index ``i`` is in bag ``b``: the number of bag starts ``<= i``, minus one.
    (``symbolic_helper``'s squeeze/unsqueeze/slice helpers write each op's form for the opset.)"""
    import torch
    from torch.onnx import symbolic_helper as sh

    def const(v: Any, dtype: Any = torch.int64) -> Any:
        return g.op("Constant", value_t=torch.tensor(v, dtype=dtype))

    def reduce_sum(x: Any, axis: int, keep: int) -> Any:
        if opset >= 13:
            return g.op("ReduceSum", x, const([axis]), keepdims_i=keep)
        return g.op("ReduceSum", x, axes_i=[axis], keepdims_i=keep)

    def as_weight(x: Any) -> Any:
        return g.op("CastLike", x, weight) if opset >= 15 else g.op("Cast", x, to_i=1)  # 1: FLOAT

    def length(x: Any) -> Any:
        return sh._squeeze_helper(g, g.op("Shape", x), [0])

    position = g.op("Range", const(0), length(indices), const(1))
    starts = sh._slice_helper(g, offsets, axes=[0], starts=[0], ends=[-1]) if include_last_offset else offsets
    later = g.op("Greater", sh._unsqueeze_helper(g, starts, [0]), sh._unsqueeze_helper(g, position, [1]))
    begun = g.op("Not", later)  # starts <= position (LessOrEqual is opset 12+)
    bag = g.op("Sub", reduce_sum(g.op("Cast", begun, to_i=7), 1, 0), const(1))  # 7: INT64
    every = sh._unsqueeze_helper(g, g.op("Range", const(0), length(starts), const(1)), [1])
    member = g.op("Equal", every, sh._unsqueeze_helper(g, bag, [0]))
    keep = None  # which indices count: not the padding row, not past the last offset (include_last_offset)
    if padding_idx is not None and padding_idx >= 0:
        keep = g.op("Not", g.op("Equal", g.op("Cast", indices, to_i=7), const(padding_idx)))
    if include_last_offset:
        last = g.op("Cast", sh._slice_helper(g, offsets, axes=[0], starts=[-1], ends=[_INT64_MAX]), to_i=7)
        inside = g.op("Less", position, last)
        keep = inside if keep is None else g.op("And", keep, inside)
    if keep is not None:
        member = g.op("And", member, sh._unsqueeze_helper(g, keep, [0]))
    member = as_weight(member)
    scaled = member
    if not sh._is_none(per_sample_weights):
        scaled = g.op("Mul", member, sh._unsqueeze_helper(g, per_sample_weights, [0]))
    out = g.op("MatMul", scaled, g.op("Gather", weight, indices, axis_i=0))
    if mode == 1:
        size = g.op("Max", reduce_sum(member, 1, 1), as_weight(const(1.0, torch.float32)))  # empty bags give 0
        out = g.op("Div", out, size)
    return out, None, None, None


def _cumsum(g: Any, x: Any, dim: Any, dtype: Any) -> Any:
    """``cumsum(x, dim, dtype)`` with torch's promotion: bool and small ints sum as int64 unless dtype says."""
    import torch
    from torch.onnx import symbolic_helper as sh

    try:
        from torch.onnx._internal.torchscript_exporter import _type_utils as tu
    except ImportError:  # torch < 2.9 kept it at the top of torch.onnx
        from torch.onnx import _type_utils as tu  # type: ignore[no-redef,attr-defined]

    axis = g.op("Constant", value_t=torch.tensor(sh._get_const(dim, "i", "dim"), dtype=torch.int64))
    asked = None if sh._is_none(dtype) else sh._maybe_get_const(dtype, "i")
    small = (
        tu.JitScalarType.BOOL,
        tu.JitScalarType.UINT8,
        tu.JitScalarType.INT8,
        tu.JitScalarType.INT16,
        tu.JitScalarType.INT,
    )
    if isinstance(asked, int):
        x = g.op("Cast", x, to_i=tu.JitScalarType(asked).onnx_type())
    elif tu.JitScalarType.from_value(x, tu.JitScalarType.UNDEFINED) in small:
        x = g.op("Cast", x, to_i=tu.JitScalarType.INT64.onnx_type())
    return g.op("CumSum", x, axis)


def _diff(g: Any, x: Any, n: Any, dim: Any, prepend: Any, append: Any) -> Any:
    """``diff(x, n=1, dim, prepend, append)`` = the slice from 1 minus the slice up to -1, after concatenating."""
    import torch
    from torch.onnx import symbolic_helper as sh

    steps = sh._maybe_get_const(n, "i")
    axis = sh._maybe_get_const(dim, "i")
    if not isinstance(steps, int) or not isinstance(axis, int) or steps != 1:
        return sh._unimplemented("diff", "n other than a constant 1, or a dim that is not constant")
    parts = [p for p in (prepend, x, append) if not sh._is_none(p)]
    whole = g.op("Concat", *parts, axis_i=axis) if len(parts) > 1 else x

    def const(v: int) -> Any:
        return g.op("Constant", value_t=torch.tensor([v], dtype=torch.int64))

    axes = const(axis)
    hi = g.op("Slice", whole, const(1), const(_INT64_MAX), axes)
    lo = g.op("Slice", whole, const(0), const(-1), axes)
    return g.op("Sub", hi, lo)
