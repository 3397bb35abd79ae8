"""Tiny torch models and their ONNX exports (both torch exporters) for the model-level tests."""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import torch
from torch import nn


def _bn(c: int) -> nn.BatchNorm2d:
    bn = nn.BatchNorm2d(c)
    bn.running_mean.uniform_(-0.5, 0.5)
    bn.running_var.uniform_(0.5, 1.5)
    return bn


class ResCNN(nn.Module):
    """Conv/BN/ReLU with a residual Add, MaxPool, AvgPool, global pool, Flatten, Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), _bn(8), nn.ReLU(), nn.MaxPool2d(2))
        self.block = nn.Sequential(
            nn.Conv2d(8, 8, 3, padding=2, dilation=2), _bn(8), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1)
        )
        self.down = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.AvgPool2d(2, ceil_mode=True))
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = torch.relu(x + self.block(x))
        x = nn.functional.adaptive_avg_pool2d(self.down(x), 1)
        return self.head(torch.flatten(x, 1))


class DepthwiseCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1),
            _bn(16),
            nn.ReLU6(),
            nn.Conv2d(16, 16, 3, padding=1, groups=16),
            _bn(16),
            nn.ReLU6(),
            nn.Conv2d(16, 24, 1),
            _bn(24),
            nn.Hardswish(),
        )
        self.head = nn.Linear(24, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x).mean((2, 3)))


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(12, 32),
            nn.GELU(),
            nn.Dropout(0.2),
            nn.Linear(32, 16),
            nn.Tanh(),
            nn.Linear(16, 3),
            nn.Softmax(-1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TwoInTwoOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(6, 4), nn.Linear(3, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.a(x) * torch.sigmoid(self.b(y))
        return h.sum(-1, keepdim=True), torch.clamp(h, -0.5, 0.5)


class Transformer(nn.Module):
    """int64 token ids -> Embedding -> 2-layer batch_first encoder (d_model 32, 2 heads) -> Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 32)
        layer = nn.TransformerEncoderLayer(32, 2, 64, dropout=0.1, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 5)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(self.emb(ids)))


class LSTMNet(nn.Module):
    def __init__(self, bidirectional: bool = False) -> None:
        super().__init__()
        self.lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True, bidirectional=bidirectional)
        self.fc = nn.Linear(32 if bidirectional else 16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(x)
        return self.fc(y)


def export(
    model: nn.Module,
    args: tuple[torch.Tensor, ...],
    path: Path,
    *,
    dynamo: bool,
    names: list[str],
    outputs: list[str],
    dims: list[dict[int, str]],
    opset: int | None = None,
) -> Path:
    """torch.onnx.export with named dynamic dims; legacy exporter at opset 17, dynamo at ``opset`` (18+)."""
    torch.manual_seed(0)
    model.eval()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if dynamo:
            made: dict[str, Any] = {}
            shapes = tuple({i: made.setdefault(n, torch.export.Dim(n)) for i, n in d.items()} for d in dims)
            torch.onnx.export(
                model,
                args,
                str(path),
                dynamo=True,
                opset_version=opset or 18,
                input_names=names,
                output_names=outputs,
                dynamic_shapes=shapes,
                verbose=False,
            )
        else:
            torch.onnx.export(
                model,
                args,
                str(path),
                dynamo=False,
                opset_version=17,
                input_names=names,
                output_names=outputs,
                dynamic_axes=dict(zip(names, dims, strict=True)),
            )
    return path


def ort_run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.log_severity_level = 4
    return list(ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds))


def _keras_to_onnx(model: Any, shape: list[int | None], path: Path) -> Path:
    import onnx
    import tensorflow as tf
    import tf2onnx

    spec = [tf.TensorSpec(shape, tf.float32, name="image")]
    proto, _ = tf2onnx.convert.from_keras(model, input_signature=spec, opset=17)
    onnx.save(proto, str(path))
    return path


def keras_cnn_onnx(path: Path) -> Path:
    """A Keras NHWC CNN (Conv, BatchNorm with random stats, MaxPool, DepthwiseConv, strided SAME Conv, GAP, Dense)."""
    import keras

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(2)
    inp = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inp)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.DepthwiseConv2D(3, padding="same")(x)
    x = keras.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inp, keras.layers.Dense(10, activation="softmax")(x))
    bn = model.layers[2]
    bn.set_weights([w + rng.uniform(0.1, 0.5, w.shape).astype(np.float32) for w in bn.get_weights()])
    return _keras_to_onnx(model, [None, 16, 16, 3], path)


def keras_mlp_onnx(path: Path) -> Path:
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((20,))
    x = keras.layers.Dropout(0.3)(keras.layers.Dense(32, activation="relu")(inp))
    model = keras.Model(inp, keras.layers.Dense(3)(keras.layers.Dense(8, activation="tanh")(x)))
    return _keras_to_onnx(model, [None, 20], path)
