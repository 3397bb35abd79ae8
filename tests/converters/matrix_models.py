"""The conversion matrix's models: four architectures x four source kinds, plus two sequence models.

Every model is built in code with fixed seeds (no downloads) and BatchNorm
statistics that are not an identity, so a hop that drops or mis-folds a BN
layer fails validation. fwx imports this file by path as a factory source
(``tests/converters/matrix_models.py:build_mlp``), so it has no relative imports.

Architectures (PyTorch NCHW / Keras NHWC):

* ``resnet``: conv+BN+ReLU stem, a residual block (conv/BN/ReLU/conv/BN + add), global pool, linear head.
* ``dwsep``: strided conv, depthwise 3x3 (groups=C), pointwise 1x1, each with BN; ReLU6; global pool; linear.
* ``mlp``: Linear/GELU/Linear/Tanh/Linear/Softmax on ``x:float32[N,20]``.
* ``two_io``: ``features[N,6]`` and ``context[N,3]`` -> ``score[N,1]`` and ``embedding[N,4]``.
* ``transformer``: ``ids:int64[N,S]`` -> Embedding -> 2-layer encoder -> ``logits[N,S,5]``.
* ``lstm``: ``x:float32[N,T,8]`` -> 2-layer LSTM -> ``y[N,T,4]``.
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

SEED = 0
HW = 24  # image side: small enough to stay fast, large enough for two strided stages


@dataclass(frozen=True)
class Arch:
    """How to pin and export one architecture (the same names in every source kind)."""

    name: str
    torch_inputs: tuple[str, ...]  # --input specs for the PyTorch source (NCHW)
    keras_inputs: tuple[str, ...]  # the same inputs as Keras/TF see them (NHWC)
    outputs: tuple[str, ...]
    dims: tuple[dict[int, str], ...]  # dynamic axes per input, for the ONNX export
    image: bool = False  # rank-4 input: has a layout
    sequence: bool = False


ARCHS: dict[str, Arch] = {
    a.name: a
    for a in (
        Arch(
            "resnet",
            (f"image:float32[N,3,{HW},{HW}]",),
            (f"image:float32[N,{HW},{HW},3]",),
            ("logits",),
            ({0: "N"},),
            image=True,
        ),
        Arch(
            "dwsep",
            (f"image:float32[N,3,{HW},{HW}]",),
            (f"image:float32[N,{HW},{HW},3]",),
            ("logits",),
            ({0: "N"},),
            image=True,
        ),
        Arch("mlp", ("x:float32[N,20]",), ("x:float32[N,20]",), ("probs",), ({0: "N"},)),
        Arch(
            "two_io",
            ("features:float32[N,6]", "context:float32[N,3]"),
            ("features:float32[N,6]", "context:float32[N,3]"),
            ("score", "embedding"),
            ({0: "N"}, {0: "N"}),
        ),
        Arch("transformer", ("ids:int64[N,S]",), (), ("logits",), ({0: "N", 1: "S"},), sequence=True),
        Arch("lstm", ("x:float32[N,T,8]",), (), ("y",), ({0: "N", 1: "T"},), sequence=True),
    )
}
CORE = ("resnet", "dwsep", "mlp", "two_io")
SEQUENCE = ("transformer", "lstm")


def _bn(c: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(c)


class ResNetCNN(nn.Module):
    """A ResNet basic block between a stem and a linear head."""

    def __init__(self, width: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), _bn(width), nn.ReLU())
        self.conv1, self.bn1 = nn.Conv2d(width, width, 3, padding=1, bias=False), _bn(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, padding=1, bias=False), _bn(width)
        self.head = nn.Linear(width, classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.stem(image)
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return self.head(torch.relu(x + y).mean((2, 3)))


class DepthwiseCNN(nn.Module):
    """MobileNet-style: strided conv, depthwise 3x3, pointwise 1x1, each followed by BN."""

    def __init__(self, width: int = 16, classes: int = 5) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, width, 3, stride=2, padding=1, bias=False),
            _bn(width),
            nn.ReLU6(),
            nn.Conv2d(width, width, 3, padding=1, groups=width, bias=False),
            _bn(width),
            nn.ReLU6(),
            nn.Conv2d(width, 24, 1, bias=False),
            _bn(24),
            nn.ReLU(),
        )
        self.head = nn.Linear(24, classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(image).mean((2, 3)))


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(20, 64), nn.GELU(), nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 5), nn.Softmax(-1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TwoInTwoOut(nn.Module):
    """A gated mix of two inputs with two heads: names and order must survive every hop."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(6, 4), nn.Linear(3, 4)
        self.score, self.embedding = nn.Linear(4, 1), nn.Linear(4, 4)

    def forward(self, features: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.a(features) * torch.sigmoid(self.b(context))
        return self.score(h), self.embedding(h)


class TransformerEncoder(nn.Module):
    """int64 token ids -> Embedding -> 2-layer batch-first encoder (d_model 32, 4 heads) -> Linear."""

    def __init__(self, vocab: int = 50) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, 32)
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 5)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(self.emb(ids)))


class LSTMNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True)
        self.fc = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(x)
        return self.fc(y)


TORCH_CLASSES: dict[str, type[nn.Module]] = {
    "resnet": ResNetCNN,
    "dwsep": DepthwiseCNN,
    "mlp": MLP,
    "two_io": TwoInTwoOut,
    "transformer": TransformerEncoder,
    "lstm": LSTMNet,
}


def build_torch(name: str, seed: int = SEED) -> nn.Module:
    """Seeded weights and seeded non-identity BatchNorm statistics, in eval mode."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    model = TORCH_CLASSES[name]()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                assert m.running_mean is not None
                assert m.running_var is not None
                m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.2)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
    return model.eval()


# Factories fwx can import by path (``matrix_models.py:build_resnet``).
def build_resnet() -> nn.Module:
    return build_torch("resnet")


def build_dwsep() -> nn.Module:
    return build_torch("dwsep")


def build_mlp() -> nn.Module:
    return build_torch("mlp")


def build_two_io() -> nn.Module:
    return build_torch("two_io")


def build_transformer() -> nn.Module:
    return build_torch("transformer")


def build_lstm() -> nn.Module:
    return build_torch("lstm")


def example_args(arch: Arch, batch: int = 2, length: int = 7) -> tuple[torch.Tensor, ...]:
    """Tracing inputs for the ONNX export (dynamic dims at sizes other than 0 and 1)."""
    gen = torch.Generator().manual_seed(SEED)
    out = []
    for spec in arch.torch_inputs:
        dtype, _, dims = spec.partition(":")[2].partition("[")
        shape = [batch if d == "N" else length if d in ("S", "T") else int(d) for d in dims.rstrip("]").split(",")]
        if dtype == "int64":
            out.append(torch.randint(0, 50, shape, generator=gen))
        else:
            out.append(torch.randn(shape, generator=gen))
    return tuple(out)


def export_onnx(name: str, path: Path, opset: int = 17) -> Path:
    """torch.onnx.export with the architecture's names and dynamic axes.

    The TorchScript-based exporter (opset 17) for all but the Transformer: it
    bakes the export-time sequence length into the attention Reshape, so that
    ONNX file would not take another length; the dynamo exporter (opset 18) does.
    """
    arch = ARCHS[name]
    names = [s.partition(":")[0] for s in arch.torch_inputs]
    model, args = build_torch(name), example_args(arch)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if name == "transformer":
            dims: dict[str, Any] = {}
            shapes = tuple({a: dims.setdefault(s, torch.export.Dim(s)) for a, s in d.items()} for d in arch.dims)
            torch.onnx.export(
                model,
                args,
                str(path),
                dynamo=True,
                opset_version=max(opset, 18),
                input_names=names,
                output_names=list(arch.outputs),
                dynamic_shapes=shapes,
                verbose=False,
                external_data=False,
            )
            return path
        axes = {n: dict(d) for n, d in zip(names, arch.dims, strict=True)}
        for out in arch.outputs:  # outputs share the batch (and sequence) symbols
            axes[out] = dict(arch.dims[0])
        torch.onnx.export(
            model,
            args,
            str(path),
            dynamo=False,
            opset_version=opset,
            input_names=names,
            output_names=list(arch.outputs),
            dynamic_axes=axes,
        )
    return path


def save_state_dict(name: str, path: Path) -> Path:
    torch.save(build_torch(name).state_dict(), path)
    return path


def _keras() -> Any:
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    return keras


def _keras_body(name: str) -> Any:
    """The Keras twin of each core architecture, channels-last, with the same input/output names."""
    keras = _keras()
    layers = keras.layers
    if name in ("resnet", "dwsep"):
        inp = keras.Input((HW, HW, 3), name="image")
        if name == "resnet":
            x = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(8, 3, padding="same", use_bias=False)(inp)))
            y = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(8, 3, padding="same", use_bias=False)(x)))
            y = layers.BatchNormalization()(layers.Conv2D(8, 3, padding="same", use_bias=False)(y))
            x, classes = layers.ReLU()(layers.Add()([x, y])), 10
        else:
            x = layers.Conv2D(16, 3, strides=2, padding="same", use_bias=False)(inp)
            x = layers.ReLU(6.0)(layers.BatchNormalization()(x))
            x = layers.ReLU(6.0)(
                layers.BatchNormalization()(layers.DepthwiseConv2D(3, padding="same", use_bias=False)(x))
            )
            x = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(24, 1, use_bias=False)(x)))
            classes = 5
        return keras.Model(inp, layers.Dense(classes, name="logits")(layers.GlobalAveragePooling2D()(x)), name=name)
    if name == "mlp":
        inp = keras.Input((20,), name="x")
        x = layers.Dense(32, activation="tanh")(layers.Dense(64, activation="gelu")(inp))
        return keras.Model(inp, layers.Dense(5, activation="softmax", name="probs")(x), name=name)
    features, context = keras.Input((6,), name="features"), keras.Input((3,), name="context")
    h = layers.Multiply()([layers.Dense(4)(features), layers.Dense(4, activation="sigmoid")(context)])
    return keras.Model(
        [features, context], [layers.Dense(1, name="score")(h), layers.Dense(4, name="embedding")(h)], name=name
    )


def build_keras(name: str, seed: int = SEED) -> Any:
    """A Keras functional model with seeded weights and non-identity BatchNorm statistics."""
    import numpy as np

    keras = _keras()
    keras.utils.set_random_seed(seed)
    model = _keras_body(name)
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            gamma, beta, mean, var = (w.numpy() for w in layer.weights)
            layer.set_weights(
                [
                    rng.uniform(0.5, 1.5, gamma.shape).astype("float32"),
                    rng.normal(0, 0.1, beta.shape).astype("float32"),
                    rng.normal(0, 0.2, mean.shape).astype("float32"),
                    rng.uniform(0.5, 1.5, var.shape).astype("float32"),
                ]
            )
    return model


def save_keras(name: str, path: Path) -> Path:
    build_keras(name).save(path)
    return path


def _tf_module(name: str) -> Any:
    """A ``tf.Module`` whose serving ``tf.function`` wraps the Keras twin, returning named outputs."""
    import tensorflow as tf

    model = build_keras(name)
    arch = ARCHS[name]
    specs = []
    for spec in arch.keras_inputs:
        iname, _, rest = spec.partition(":")
        dims = [None if d == "N" else int(d) for d in rest.partition("[")[2].rstrip("]").split(",")]
        specs.append(tf.TensorSpec(dims, tf.float32, name=iname))

    class Served(tf.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        @tf.function(input_signature=specs)  # type: ignore[untyped-decorator]
        def serve(self, *args: Any) -> Any:
            outs = self.model(list(args) if len(args) > 1 else args[0], training=False)
            outs = outs if isinstance(outs, (list, tuple)) else [outs]
            return dict(zip(arch.outputs, outs, strict=True))

    return Served()


def save_savedmodel(name: str, path: Path) -> Path:
    """Write a SavedModel: CNNs via Keras ``model.export``, the others as a ``tf.Module`` with a signature."""
    import tensorflow as tf

    if name in ("resnet", "dwsep"):
        with contextlib.redirect_stdout(io.StringIO()):
            build_keras(name).export(str(path), format="tf_saved_model", verbose=False)
        return path
    module = _tf_module(name)
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return path
