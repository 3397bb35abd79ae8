"""ONNX symbolics the TorchScript-based exporter lacks, for ops real models use.

* ``aten::diff``: Hugging Face's mask helpers (``masking_utils``, to spot packed
  sequences in GPT-2-class decoders without an attention mask) call
  ``torch.diff(position_ids, prepend=...)``; without it a traced GPT-2 has no
  path to ONNX (and so none to SavedModel or TFLite): "Exporting the operator
  'aten::diff' to ONNX opset version 17 is not supported".

Registered once per process, for every opset the legacy exporter writes.
"""

from __future__ import annotations

from typing import Any

_DONE: set[int] = set()
_INT64_MAX = 9223372036854775807


def register(opset: int) -> None:
    if opset in _DONE:
        return
    import torch

    torch.onnx.register_custom_op_symbolic("aten::diff", _diff, opset)
    _DONE.add(opset)


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
