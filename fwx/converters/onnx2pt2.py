"""ONNX -> torch.export ExportedProgram (.pt2) with fwx's own translator.

The ONNX dim_params become ``torch.export.Dim``s (shared by name across
inputs); an LSTM runs through ``scan`` under export so its time axis stays
dynamic too. Inputs and outputs are positional, in ONNX order, as for
TorchScript.
"""

from __future__ import annotations

from pathlib import Path

from fwx.converters.base import Converter, ConvertOptions, ConvertResult, SourceModel
from fwx.formats import Format


class OnnxToExportedProgram(Converter):
    source = Format.ONNX
    target = Format.PT2
    tool = "fwx-onnx-torch"
    honours = frozenset({"dynamic", "static_shapes"})
    requires = (("torch", "torch"), ("onnx", "onnx"), ("onnxruntime", "onnx"))

    def precheck(self, src: SourceModel, opts: ConvertOptions) -> None:
        from fwx.converters.onnx_torch.pipeline import precheck

        precheck(src.path)

    def convert(self, src: SourceModel, out: Path, opts: ConvertOptions) -> ConvertResult:
        self.check_available()
        from fwx.converters.onnx_torch.pipeline import convert

        return convert(src, out, opts, Format.PT2)
