"""Small deterministic sample models, built in code with fixed seeds (no downloads).

* ``SmallCNN``: PyTorch, ``image:float32[N,3,32,32]`` -> ``logits[N,10]``: convs + BatchNorm
  (random running statistics, so BN is not an identity) + a residual add + a linear head, eval mode.
* ``build_keras_model``: a Keras functional CNN, ``image:float32[N,32,32,3]`` -> ``logits[N,10]``.
* ``build_tf_module``: a ``tf.Module`` whose ``tf.function`` signature is ``x:float32[N,8]`` -> ``y[N,4]``.

``save_all(folder)`` writes all three (``cnn.pt`` state_dict, ``cnn_keras.keras``,
``tfmodule.savedmodel/``); the walkthrough and the tests use them. Export the
state_dict with ``--model-class samples.models:SmallCNN`` (or the factory
``samples.models:build_torch_cnn`` as the source itself).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

SEED = 0
IMAGE = "image"
LOGITS = "logits"


class SmallCNN(nn.Module):
    """A ResNet-style block on 32x32 RGB images; ``width`` channels, ``num_classes`` logits."""

    def __init__(self, width: int = 16, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.conv1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(width, num_classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.stem(image)
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        x = torch.relu(x + y)
        return self.head(torch.flatten(self.pool(x), 1))


def build_torch_cnn(seed: int = SEED, width: int = 16, num_classes: int = 10) -> SmallCNN:
    """A ``SmallCNN`` with seeded weights and seeded BatchNorm statistics, in eval mode."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = SmallCNN(width, num_classes)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
    return model.eval()


def _tf() -> Any:
    """TensorFlow, imported the way fwx does it (quiet, or a clear 'pip install fwx[tf]' error)."""
    from fwx.frameworks import require

    return require("tensorflow", "building the TensorFlow samples")


def build_keras_model(seed: int = SEED) -> Any:
    """A Keras functional CNN (NHWC) with seeded weights and non-trivial BatchNorm statistics."""
    _tf()
    import keras
    import numpy as np

    keras.utils.set_random_seed(seed)
    inp = keras.Input((32, 32, 3), name=IMAGE)
    x = keras.layers.Conv2D(8, 3, padding="same", use_bias=False)(inp)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    y = keras.layers.Conv2D(8, 3, padding="same")(x)
    x = keras.layers.Add()([x, y])
    x = keras.layers.GlobalAveragePooling2D()(x)
    out = keras.layers.Dense(10, name=LOGITS)(x)
    model = keras.Model(inp, out, name="keras_cnn")
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            gamma, beta, mean, var = (w.numpy() for w in layer.weights)
            layer.set_weights(
                [
                    rng.uniform(0.5, 1.5, gamma.shape).astype("float32"),
                    rng.normal(0, 0.1, beta.shape).astype("float32"),
                    rng.normal(0, 0.1, mean.shape).astype("float32"),
                    rng.uniform(0.5, 1.5, var.shape).astype("float32"),
                ]
            )
    return model


def build_tf_module(seed: int = SEED) -> Any:
    """A ``tf.Module`` with a ``tf.function`` serving signature ``x:float32[N,8] -> y:float32[N,4]``."""
    tf = _tf()

    class Dense(tf.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            gen = tf.random.Generator.from_seed(seed)
            self.w = tf.Variable(gen.normal([8, 4]), name="w")
            self.b = tf.Variable(gen.normal([4]), name="b")

        @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="x")])
        def __call__(self, x: Any) -> Any:
            return {"y": tf.nn.tanh(tf.matmul(x, self.w) + self.b)}

    return Dense()


def save_all(folder: str | Path) -> dict[str, Path]:
    """Write the three sample sources into ``folder``; returns name -> path."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"cnn": out / "cnn.pt", "keras": out / "cnn_keras.keras", "savedmodel": out / "tfmodule.savedmodel"}
    torch.save(build_torch_cnn().state_dict(), paths["cnn"])
    build_keras_model().save(paths["keras"])
    tf = _tf()
    module = build_tf_module()
    tf.saved_model.save(module, str(paths["savedmodel"]), signatures={"serving_default": module.__call__})
    return paths


if __name__ == "__main__":
    import sys

    for key, path in save_all(sys.argv[1] if len(sys.argv) > 1 else "samples/build").items():
        print(f"{key}: {path}")
