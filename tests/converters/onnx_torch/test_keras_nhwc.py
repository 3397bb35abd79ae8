"""What tf2onnx writes for Keras (NHWC input, Transpose around Conv, MatMul+Add, ReduceMean/GlobalAveragePool,
Softmax): a Keras CNN and MLP through fwx's translator, at two batch sizes against onnxruntime."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import pytest
from test_models import check_sizes, convert

from fwx.formats import Format

pytestmark = pytest.mark.slow
RNG = np.random.default_rng(2)


def _to_onnx(model: object, shape: list[int | None], path: Path) -> Path:
    import tensorflow as tf
    import tf2onnx

    spec = [tf.TensorSpec(shape, tf.float32, name="image")]
    proto, _ = tf2onnx.convert.from_keras(model, input_signature=spec, opset=17)
    onnx.save(proto, str(path))
    return path


@pytest.fixture(scope="module")
def keras_cnn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inp)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.DepthwiseConv2D(3, padding="same")(x)
    x = keras.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    out = keras.layers.Dense(10, activation="softmax")(x)
    model = keras.Model(inp, out)
    bn = model.layers[2]
    bn.set_weights([w + RNG.uniform(0.1, 0.5, w.shape).astype(np.float32) for w in bn.get_weights()])
    return _to_onnx(model, [None, 16, 16, 3], tmp_path_factory.mktemp("keras") / "keras_cnn.onnx")


@pytest.fixture(scope="module")
def keras_mlp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((20,))
    x = keras.layers.Dropout(0.3)(keras.layers.Dense(32, activation="relu")(inp))
    model = keras.Model(inp, keras.layers.Dense(3)(keras.layers.Dense(8, activation="tanh")(x)))
    return _to_onnx(model, [None, 20], tmp_path_factory.mktemp("keras") / "keras_mlp.onnx")


@pytest.mark.parametrize("target", [Format.TORCHSCRIPT, Format.PT2], ids=str)
def test_keras_cnn_nhwc(keras_cnn: Path, target: Format) -> None:
    ops = collections.Counter(n.op_type for n in onnx.load(str(keras_cnn)).graph.node)
    assert ops["Transpose"] >= 1  # NHWC -> NCHW around the convolutions
    result = convert(keras_cnn, target)
    assert result.signature.inputs[0].shape[1:] == (16, 16, 3)  # layout kept: NHWC in, as the source
    feeds = [{"image": RNG.standard_normal((b, 16, 16, 3)).astype(np.float32)} for b in (1, 4)]
    assert check_sizes(result, target, keras_cnn, feeds) < 1e-4


def test_keras_mlp(keras_mlp: Path) -> None:
    result = convert(keras_mlp, Format.TORCHSCRIPT)
    feeds = [{"image": RNG.standard_normal((b, 20)).astype(np.float32)} for b in (2, 9)]
    check_sizes(result, Format.TORCHSCRIPT, keras_mlp, feeds)
