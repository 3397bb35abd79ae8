"""ONNX -> torch.export ExportedProgram (.pt2) with fwx's own translator.

The ONNX dim_params become ``torch.export.Dim``s (shared by name across
inputs); an LSTM runs through ``scan`` under export so its time axis stays
dynamic too. Inputs and outputs are positional, in ONNX order, as for
TorchScript.
"""

from __future__ import annotations

from fwx.converters.onnx2torchscript import OnnxToTorch
from fwx.formats import Format


class OnnxToExportedProgram(OnnxToTorch):
    target = Format.PT2
