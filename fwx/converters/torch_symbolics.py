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
    if opset >= 11:  # CumSum exists from opset 11
        register_custom_op_symbolic("aten::cumsum", _cumsum, opset)
    _DONE.add(opset)


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
