"""What tf2onnx writes for Keras (NHWC input, Transpose around Conv, MatMul+Add, ReduceMean/GlobalAveragePool,
Softmax): a Keras CNN and MLP through fwx's translator, at two batch sizes against onnxruntime."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx_torch_models import keras_cnn_onnx, keras_mlp_onnx
from test_models import check_sizes, convert

from fwx.formats import Format

pytestmark = pytest.mark.slow
RNG = np.random.default_rng(2)


@pytest.fixture(scope="module")
def keras_cnn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return keras_cnn_onnx(tmp_path_factory.mktemp("keras") / "keras_cnn.onnx")


@pytest.fixture(scope="module")
def keras_mlp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return keras_mlp_onnx(tmp_path_factory.mktemp("keras") / "keras_mlp.onnx")


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
