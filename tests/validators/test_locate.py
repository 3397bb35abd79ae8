"""Locate a mismatch: a fault planted in one node of a correct artifact is named, per format.

Real models, real runtimes; the fault is written into the artifact file itself
(an ONNX initializer or op type, a TFLite weight buffer, a SavedModel
variable), and the located node must be exactly the one planted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fwx.formats import Format
from fwx.runtimes import Runtime, load_runtime
from fwx.signature import Signature
from fwx.validators import validate
from fwx.validators.locate import Side, locate
from fwx.validators.mismatch import Mismatch

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
numpy_helper = pytest.importorskip("onnx.numpy_helper")


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(width, width, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(width)

    def forward(self, x: Any) -> Any:
        return torch.relu(self.bn(self.conv1(x))) + x


class Net(torch.nn.Module):
    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, width, 3, padding=1)
        self.layer1 = torch.nn.Sequential(Block(width), Block(width))
        self.fc = torch.nn.Linear(width, 5)

    def forward(self, x: Any) -> Any:
        return self.fc(self.layer1(torch.relu(self.stem(x))).mean((2, 3)))


def _samples(shape: tuple[int, ...], name: str) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [{name: rng.standard_normal((b, *shape[1:])).astype(np.float32)} for b in (1, 3)]


@pytest.fixture(scope="module")
def torch_net(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():  # BatchNorm statistics that are not the identity: folding them changes the conv
        for blk in net.layer1:
            blk.bn.running_mean.uniform_(-0.5, 0.5)
            blk.bn.running_var.uniform_(0.5, 2.0)
    path = tmp_path_factory.mktemp("net") / "net.onnx"
    torch.onnx.export(
        net,
        (torch.randn(1, 3, 8, 8),),
        str(path),
        dynamo=False,
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "N"}, "y": {0: "N"}},
        opset_version=17,
    )
    return net, path


def _plant_onnx(src: Path, out: Path, node_name: str, *, op: str | None = None) -> Path:
    model = onnx.load(str(src))
    node = next(n for n in model.graph.node if n.name == node_name)
    if op is not None:
        node.op_type = op
    else:
        init = next(i for i in model.graph.initializer if i.name == node.input[1])
        w = numpy_helper.to_array(init).copy()
        w[0] *= 1.5
        init.CopyFrom(numpy_helper.from_array(w, init.name))
    onnx.save(model, str(out))
    return out


def _torch_ref(net: Any, sig: Signature) -> Runtime:
    from fwx.runtimes.eager_torch import EagerTorchRuntime

    return EagerTorchRuntime.from_module(net, sig)


def test_onnx_initializer_fault_is_named_against_the_torch_module(torch_net: tuple[Any, Path], tmp_path: Path) -> None:
    net, good = torch_net
    bad = load_runtime(Format.ONNX, _plant_onnx(good, tmp_path / "bad.onnx", "/layer1/layer1.1/conv1/Conv"))
    sig = bad.signature()
    m = locate(
        Side(_torch_ref(net, sig), "source", "nchw"),
        Side(bad, "onnx", "nchw"),
        _samples((1, 3, 8, 8), "x"),
        signature=sig,
    )
    assert m.node is not None, m.note
    assert (m.node.node, m.node.op, m.node.origin) == ("/layer1/layer1.1/conv1/Conv", "Conv", "module layer1.1.conv1")
    assert m.matched_by == "layer names"
    before = m.layers[: m.layers.index(m.node)]
    assert before
    assert all(n.passed for n in before)


def test_a_correct_onnx_has_no_node_out_of_tolerance(torch_net: tuple[Any, Path]) -> None:
    net, good = torch_net
    rt = load_runtime(Format.ONNX, good)
    sig = rt.signature()
    m = locate(
        Side(_torch_ref(net, sig), "source", "nchw"),
        Side(rt, "onnx", "nchw"),
        _samples((1, 3, 8, 8), "x"),
        signature=sig,
    )
    assert m.node is None
    assert len(m.layers) >= 5
    assert all(n.passed for n in m.layers)


def test_a_swapped_op_is_named_by_fwx_validate_on_loose_files(torch_net: tuple[Any, Path], tmp_path: Path) -> None:
    _, good = torch_net
    bad = _plant_onnx(good, tmp_path / "swapped.onnx", "/layer1/layer1.0/Relu", op="Sigmoid")
    report = validate([good, bad])
    art = report.artifact("swapped.onnx")
    assert not art.passed
    assert art.mismatch is not None
    assert art.mismatch.node is not None
    assert art.mismatch.node.node == "/layer1/layer1.0/Relu"
    assert art.mismatch.matched_by == "tensor names"
    assert any("first node out of tolerance: '/layer1/layer1.0/Relu'" in f for f in report.failures())
    assert report.to_json()["artifacts"][0]["mismatch"]["node"] == "/layer1/layer1.0/Relu"
    assert "<svg" in _html(report, tmp_path)


def _html(report: Any, tmp_path: Path) -> str:
    return report.write(tmp_path / "r.html").read_text()


# --- TensorFlow: a Keras source, its SavedModel and TFLite ---------------------------------------------------


@pytest.fixture(scope="module")
def keras_net(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path, Path]:
    keras = pytest.importorskip("keras")
    tf = pytest.importorskip("tensorflow")
    keras.utils.set_random_seed(0)
    inp = keras.Input((8, 8, 3), name="image")
    x = keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="c1")(inp)
    x = keras.layers.BatchNormalization(name="bn")(x)
    x = keras.layers.Conv2D(4, 3, padding="same", name="c2")(x)
    x = keras.layers.GlobalAveragePooling2D(name="gap")(x)
    model = keras.Model(inp, keras.layers.Dense(5, name="head")(x))
    bn = model.get_layer("bn")
    g, b, mu, var = bn.get_weights()  # statistics TFLite folds partly into the next conv: a fused-tail case
    bn.set_weights([g * 1.3, b + 0.2, mu + 0.1, var * 2])
    folder = tmp_path_factory.mktemp("keras")
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        "serving_default", model.call, input_signature=[tf.TensorSpec([None, 8, 8, 3], tf.float32, name="image")]
    )
    archive.write_out(str(folder / "sm"), verbose=False)
    tflite = folder / "model.tflite"
    tflite.write_bytes(tf.lite.TFLiteConverter.from_saved_model(str(folder / "sm")).convert())
    return model, folder / "sm", tflite


def _keras_locate(model: Any, rt: Runtime) -> Mismatch:
    from fwx.runtimes.eager_keras import KerasRuntime

    ref = KerasRuntime.from_model(model)
    sig = ref.signature()
    return locate(
        Side(ref, "source", "nhwc"), Side(rt, "artifact", "nhwc"), _samples((1, 8, 8, 3), "image"), signature=sig
    )


def test_tflite_weight_buffer_fault_is_named(keras_net: tuple[Any, Path, Path], tmp_path: Path) -> None:
    model, _, tflite = keras_net
    good = _keras_locate(model, load_runtime(Format.TFLITE, tflite))
    assert good.node is None
    assert len(good.layers) >= 4
    kernel = model.get_layer("c2").get_weights()[0]
    data = bytearray(tflite.read_bytes())
    raw = np.ascontiguousarray(kernel.transpose(3, 0, 1, 2)).astype(np.float32).tobytes()  # TFLite filters: OHWI
    at = data.find(raw)
    assert at > 0
    planted = np.frombuffer(raw, np.float32).copy()
    planted[:9] *= 1.5  # one output channel's taps
    data[at : at + len(raw)] = planted.tobytes()
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(bytes(data))
    m = _keras_locate(model, load_runtime(Format.TFLITE, bad))
    assert m.node is not None, m.note
    assert (m.node.op, m.node.origin) == ("CONV_2D", "layer c2")
    assert "c2_1/convolution" in m.node.node


def test_savedmodel_variable_fault_is_named(keras_net: tuple[Any, Path, Path], tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    model, sm, _ = keras_net
    kernel = model.get_layer("c2").get_weights()[0]
    loaded = tf.saved_model.load(str(sm))
    var = next(v for v in loaded.variables if v.shape == kernel.shape and np.array_equal(v.numpy(), kernel))
    var.assign(kernel * np.where(np.arange(kernel.shape[-1]) == 0, 1.5, 1.0).astype(np.float32))
    tf.saved_model.save(loaded, str(tmp_path / "bad"), signatures=loaded.signatures)
    rt = load_runtime(Format.SAVEDMODEL, tmp_path / "bad", signature_name="serving_default")
    m = _keras_locate(model, rt)
    assert m.node is not None, m.note
    assert m.node.origin == "layer c2"
    assert "/c2_1/" in m.node.node
