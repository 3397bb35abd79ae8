"""tf2onnx's made-up node names (``Conv__43``) are mapped back to the Keras layer they came from.

tf2onnx names the nodes it creates while rewriting with a counter and no
scope; the located node then said nothing about where it came from. The ONNX
here is tf2onnx's own conversion of a small Keras model; the convolution of
layer ``c2`` is renamed the way tf2onnx names a node it fused (a counter, the
output keeps the TF tensor name), and a fault is planted in its weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fwx.formats import Format
from fwx.runtimes import load_runtime
from fwx.validators.locate import Side, locate
from fwx.validators.tf_origin import keras_layer, tf2onnx_origins
from fwx.validators.tracers import OnnxTracer

onnx = pytest.importorskip("onnx")
numpy_helper = pytest.importorskip("onnx.numpy_helper")
MADE_UP = "Conv__43"


def test_keras_layer_names() -> None:
    assert keras_layer("functional_1/c1_1/Relu") == "c1"
    assert keras_layer("StatefulPartitionedCall/functional_1/block_1_1/convolution:0") == "block_1"
    assert keras_layer("sequential/conv2d_1/BiasAdd") == "conv2d_1"  # tf.keras 2: no call suffix
    assert keras_layer("Transpose__29") == ""
    assert keras_layer("/layer1/conv/Conv") == ""  # a torch.onnx scope has no model/layer/op triple


@pytest.fixture(scope="module")
def keras_onnx(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    keras = pytest.importorskip("keras")
    tf = pytest.importorskip("tensorflow")
    tf2onnx = pytest.importorskip("tf2onnx")
    keras.utils.set_random_seed(0)
    inp = keras.Input((8, 8, 3), name="image")
    x = keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="c1")(inp)
    x = keras.layers.Conv2D(4, 3, padding="same", name="c2")(x)  # no activation: the Conv is the layer's output
    x = keras.layers.Flatten(name="flat")(x)
    model = keras.Model(inp, keras.layers.Dense(5, name="head")(x))
    path = tmp_path_factory.mktemp("tf2onnx") / "model.onnx"
    spec = (tf.TensorSpec((None, 8, 8, 3), tf.float32, name="image"),)
    tf2onnx.convert.from_keras(model, input_signature=spec, opset=17, output_path=str(path))
    return model, path


def _made_up(src: Path, out: Path, *, fault: bool) -> Path:
    """Rename layer c2's Conv as tf2onnx names a node it creates; optionally scale one output channel."""
    model = onnx.load(str(src))
    conv = next(n for n in model.graph.node if n.op_type == "Conv" and keras_layer(n.name) == "c2")
    conv.name = MADE_UP
    weight = next(i for i in model.graph.initializer if i.name == conv.input[1])
    if fault:
        w = numpy_helper.to_array(weight).copy()
        w[0] *= 1.5
        weight.CopyFrom(numpy_helper.from_array(w, weight.name))
    onnx.save(model, str(out))
    return out


def test_every_node_of_a_tf2onnx_graph_has_its_layer(keras_onnx: tuple[Any, Path], tmp_path: Path) -> None:
    _, path = keras_onnx
    graph = onnx.load(str(_made_up(path, tmp_path / "m.onnx", fault=False))).graph
    origins = tf2onnx_origins(graph)
    assert origins[MADE_UP] == "layer c2"
    assert set(origins) == {n.name for n in graph.node}
    assert all(o.removeprefix("layer ") in {"c1", "c2", "flat", "head"} for o in origins.values()), origins
    probes = {p.node: p for p in OnnxTracer(tmp_path / "m.onnx").probes}
    assert probes[MADE_UP].scope == "layer c2"


def test_a_torch_onnx_graph_gets_no_keras_origins(torch_files: dict[str, Path]) -> None:
    assert tf2onnx_origins(onnx.load(str(torch_files["onnx"])).graph) == {}


def test_a_fault_in_a_made_up_node_is_named_with_its_layer(keras_onnx: tuple[Any, Path], tmp_path: Path) -> None:
    """Against the float tf2onnx graph (as an INT8 artifact is located against it): the reference's names say
    no more than the artifact's, so the origin comes from the artifact's graph alone."""
    _, path = keras_onnx
    good = _made_up(path, tmp_path / "good.onnx", fault=False)
    bad = _made_up(path, tmp_path / "bad.onnx", fault=True)
    ref = load_runtime(Format.ONNX, good)
    rng = np.random.default_rng(0)
    samples = [{"image": rng.standard_normal((b, 8, 8, 3)).astype(np.float32)} for b in (1, 3)]
    m = locate(
        Side(ref, "float", "nhwc"),
        Side(load_runtime(Format.ONNX, bad), "artifact", "nhwc"),
        samples,
        signature=ref.signature(),
    )
    assert m.node is not None, m.note
    assert (m.node.node, m.node.origin) == (MADE_UP, "layer c2")
