"""The edge table. Adding an edge = one module ``<src>2<dst>.py`` + one line here."""

from __future__ import annotations

from fwx.converters.base import register_edge
from fwx.formats import Format as F

_P = "fwx.converters."

# Same-framework exports.
register_edge(F.PYTORCH, F.TORCHSCRIPT, _P + "torch2torchscript", "TorchToTorchScript")
register_edge(F.PYTORCH, F.PT2, _P + "torch2pt2", "TorchToExportedProgram")
register_edge(F.PYTORCH, F.ONNX, _P + "torch2onnx", "TorchToOnnx")
register_edge(F.PYTORCH, F.ONNX, _P + "torch2onnx", "TorchToOnnxDynamo")  # fallback, opset >= 18
register_edge(F.KERAS, F.SAVEDMODEL, _P + "keras2savedmodel", "KerasToSavedModel")
register_edge(F.KERAS, F.ONNX, _P + "keras2onnx", "KerasToOnnx")
register_edge(F.SAVEDMODEL, F.TFLITE, _P + "savedmodel2tflite", "SavedModelToTFLite")
register_edge(F.SAVEDMODEL, F.ONNX, _P + "savedmodel2onnx", "SavedModelToOnnx")

# Cross-framework translators.
register_edge(F.ONNX, F.SAVEDMODEL, _P + "onnx2savedmodel", "OnnxToSavedModel")
register_edge(F.ONNX, F.TORCHSCRIPT, _P + "onnx2torchscript", "OnnxToTorchScript")
register_edge(F.ONNX, F.PT2, _P + "onnx2pt2", "OnnxToExportedProgram")
