"""Tiny real models and their artifacts, built with torch/TF APIs directly (not fwx's exporter).

Each builder is cached per process, so tests/runtimes and tests/validators
share one build. Artifacts go to a temp folder removed at exit.
"""

from __future__ import annotations

import atexit
import copy
import functools
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from fwx.signature import Signature, TensorSpec

MLP_SIG = Signature((TensorSpec("x", "float32", ("N", 8)),), (TensorSpec("logits", "float32", ("N", 4)),))
CNN_SIG = Signature((TensorSpec("image", "float32", ("N", 3, 8, 8)),), (TensorSpec("logits", "float32", ("N", 5)),))
FEAT_SIG = Signature(
    (TensorSpec("image", "float32", ("N", 3, 8, 8)),), (TensorSpec("features", "float32", ("N", 4, 8, 8)),)
)


@functools.cache
def workdir() -> Path:
    d = Path(tempfile.mkdtemp(prefix="fwx-test-models-"))
    atexit.register(shutil.rmtree, d, True)
    return d


def torch_mlp(seed: int = 0) -> Any:
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()


def torch_cnn() -> Any:
    import torch

    torch.manual_seed(1)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, 5),
    ).eval()


def torch_features() -> Any:
    """A conv with a 4-D output, to check that outputs are transposed back too."""
    import torch

    torch.manual_seed(2)
    return torch.nn.Conv2d(3, 4, 3, padding=1).eval()


def nhwc(module: Any, out_4d: bool = False) -> Any:
    """The same module taking NHWC input (and returning NHWC when its output is 4-D)."""
    import torch

    class Nhwc(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = module

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.inner(x.permute(0, 3, 1, 2))
            return y.permute(0, 2, 3, 1) if out_4d else y

    return Nhwc().eval()


def perturbed(module: Any, scale: float = 1e-2) -> Any:
    import torch

    m = copy.deepcopy(module)
    g = torch.Generator().manual_seed(123)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return m


def export_onnx(module: Any, path: Path, sig: Signature, example: Any, *, dynamic: bool = True) -> Path:
    import torch

    axes = {s.name: {0: "N"} for s in (*sig.inputs, *sig.outputs)} if dynamic else None
    torch.onnx.export(
        module,
        (example,),
        str(path),
        input_names=sig.input_names,
        output_names=sig.output_names,
        dynamic_axes=axes,
        dynamo=False,
        opset_version=17,
    )
    return path


def export_torchscript(module: Any, path: Path, example: Any) -> Path:
    import torch

    torch.jit.trace(module, (example,)).save(str(path))
    return path


def export_pt2(module: Any, path: Path, example: Any) -> Path:
    import torch

    ep = torch.export.export(module, (example,), dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=1024)},))
    torch.export.save(ep, str(path))
    return path


@functools.cache
def torch_artifacts() -> dict[str, Path]:
    """The MLP as ONNX/TorchScript/.pt2, plus a perturbed and a batch-pinned ONNX."""
    import torch

    d = workdir() / "torch"
    d.mkdir()
    m, x = torch_mlp(), torch.randn(2, 8)
    return {
        "onnx": export_onnx(m, d / "model.onnx", MLP_SIG, x),
        "torchscript": export_torchscript(m, d / "model.torchscript.pt", x),
        "pt2": export_pt2(m, d / "model.pt2", x),
        "onnx_perturbed": export_onnx(perturbed(m), d / "perturbed.onnx", MLP_SIG, x),
        "onnx_pinned": export_onnx(m, d / "pinned.onnx", MLP_SIG, torch.randn(1, 8), dynamic=False),
    }


@functools.cache
def layout_artifacts() -> dict[str, Path]:
    """The CNN and the 4-D feature conv as NHWC ONNX files (the reference stays NCHW)."""
    import torch

    d = workdir() / "layout"
    d.mkdir()
    x = torch.randn(2, 8, 8, 3)
    cnn_sig = Signature((TensorSpec("image", "float32", ("N", 8, 8, 3)),), CNN_SIG.outputs)
    feat_sig = Signature(
        (TensorSpec("image", "float32", ("N", 8, 8, 3)),), (TensorSpec("features", "float32", ("N", 8, 8, 4)),)
    )
    return {
        "cnn_nhwc": export_onnx(nhwc(torch_cnn()), d / "cnn_nhwc.onnx", cnn_sig, x),
        "features_nhwc": export_onnx(nhwc(torch_features(), out_4d=True), d / "feat_nhwc.onnx", feat_sig, x),
    }


@functools.cache
def keras_mlp() -> Any:
    import keras

    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [keras.Input((8,), name="x"), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(4, name="logits")]
    )


def _representative() -> Any:
    rng = np.random.default_rng(7)
    for _ in range(64):
        yield {"x": rng.standard_normal((1, 8)).astype(np.float32)}


@functools.cache
def keras_artifacts() -> dict[str, Path]:
    """The Keras MLP as a SavedModel (outputs named ``logits``), fp32 TFLite and int8-I/O TFLite."""
    import tensorflow as tf

    d = workdir() / "keras"
    d.mkdir()
    model = keras_mlp()

    import keras

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        "serving_default",
        lambda x: {"logits": model(x, training=False)},
        input_signature=[tf.TensorSpec([None, 8], tf.float32, name="x")],
    )
    sm = d / "model.savedmodel"
    archive.write_out(str(sm), verbose=False)
    fp32 = d / "model.tflite"
    fp32.write_bytes(tf.lite.TFLiteConverter.from_saved_model(str(sm)).convert())
    conv = tf.lite.TFLiteConverter.from_saved_model(str(sm))
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = _representative
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = tf.int8
    conv.inference_output_type = tf.int8
    int8 = d / "model.int8.tflite"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the calibrator uses the deprecated tf.lite.Interpreter
        int8.write_bytes(conv.convert())
    return {"savedmodel": sm, "tflite": fp32, "tflite_int8": int8}
