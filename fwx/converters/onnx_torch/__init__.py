"""fwx's own ONNX -> PyTorch translator (TorchScript and torch.export targets).

The ONNX graph becomes a ``torch.fx.GraphModule`` whose weights are buffers and
whose sizes are read from the inputs at run time; ``pipeline`` scripts or
exports it, writes the artifact and checks it against onnxruntime at several
batch/sequence sizes. Importing this package imports nothing heavy; its
modules import torch and onnx.
"""

from __future__ import annotations
