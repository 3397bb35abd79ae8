"""The op table, filled by importing each op module (they register with ``@op``)."""

from __future__ import annotations

from fwx.converters.onnx_torch.ops import elementwise, nn, reduce, resize, rnn, shape, tensor  # noqa: F401
from fwx.converters.onnx_torch.ops.registry import CHECKS, OPS, OnnxNode

__all__ = ["CHECKS", "OPS", "OnnxNode"]
