"""ONNX -> TorchScript with fwx's own translator (torch.fx graph, then ``torch.jit.script``).

Scripting keeps every dynamic dim: sizes are read with ``x.size(i)`` at run
time. ``forward`` takes the ONNX inputs positionally in ONNX order and returns
one tensor (single output) or a tuple in ONNX output order.
"""

from __future__ import annotations

from pathlib import Path

from fwx.converters.base import Converter, ConvertOptions, ConvertResult, SourceModel
from fwx.formats import Format


class OnnxToTorch(Converter):
    """Both ONNX -> PyTorch edges: one translator, the target decides how the module is written."""

    source = Format.ONNX
    tool = "fwx-onnx-torch"
    honours = frozenset({"dynamic", "static_shapes"})
    requires = (("torch", "torch"), ("onnx", "onnx"), ("onnxruntime", "onnx"))
    prefetchable = True

    def precheck(self, src: SourceModel, opts: ConvertOptions) -> None:
        from fwx.converters.onnx_torch.convert import precheck

        precheck(src.path, self.target)

    def convert(self, src: SourceModel, out: Path, opts: ConvertOptions) -> ConvertResult:
        self.check_available()
        from fwx.converters.onnx_torch.convert import convert

        return convert(src, out, opts, self.target)


class OnnxToTorchScript(OnnxToTorch):
    target = Format.TORCHSCRIPT
