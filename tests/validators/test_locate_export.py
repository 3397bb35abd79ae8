"""An export whose converter writes one wrong weight names the node in fwx.json, the report and the error.

The fault is planted in the real converter's real output (the SavedModel the
ONNX->TF translator wrote gets one variable scaled), so read-back, validation
and locating all run on a genuinely wrong artifact.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fwx.converters.onnx2savedmodel import OnnxToSavedModel
from fwx.errors import ValidationError
from fwx.exporter import ExportOptions, export

onnx = pytest.importorskip("onnx")
tf = pytest.importorskip("tensorflow")
numpy_helper = pytest.importorskip("onnx.numpy_helper")
torch = pytest.importorskip("torch")

NODE = "/layer1/layer1.1/conv1/Conv"


@pytest.fixture(scope="module")
def net_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from validators.test_locate import Net  # the same tiny residual net as the per-format tests

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("src") / "net.onnx"
    torch.onnx.export(
        Net(width=16).eval(),  # 16x16x3x3 weights: the translator keeps them as variables (>= 1024 elements)
        (torch.randn(1, 3, 8, 8),),
        str(path),
        dynamo=False,
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "N"}, "y": {0: "N"}},
        opset_version=17,
    )
    return path


@pytest.fixture
def planted(net_onnx: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The translator's SavedModel, with the variable that holds ``NODE``'s weight scaled by 1.5."""
    model = onnx.load(str(net_onnx))
    node = next(n for n in model.graph.node if n.name == NODE)
    weight = numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == node.input[1]))
    real = OnnxToSavedModel.convert

    def convert(self: OnnxToSavedModel, src: Any, out: Path, opts: Any) -> Any:
        result = real(self, src, out, opts)
        loaded = tf.saved_model.load(str(out))
        var = next(v for v in loaded.weights_list if np.array_equal(np.sort(v.numpy(), None), np.sort(weight, None)))
        var.assign(var.numpy() * 1.5)
        tmp = out.with_name(out.name + ".planted")
        tf.saved_model.save(loaded, str(tmp), signatures=loaded.signatures)
        shutil.rmtree(out)
        tmp.rename(out)
        return result

    monkeypatch.setattr(OnnxToSavedModel, "convert", convert)


@pytest.mark.usefixtures("planted")
def test_a_failed_target_names_its_first_wrong_node(net_onnx: Path, tmp_path: Path) -> None:
    opts = ExportOptions(out=tmp_path / "repo", prefetch="off")
    with pytest.raises(ValidationError, match="validation failed"):
        export(net_onnx, ["savedmodel"], opts)
    result = export(net_onnx, ["savedmodel"], ExportOptions(out=tmp_path / "repo", prefetch="off", keep_failed=True))
    assert result.version_dir is not None
    manifest = json.loads((result.version_dir / "fwx.json").read_text())
    entry = manifest["artifacts"]["savedmodel"]
    assert entry["status"] == "failed"
    found = entry["validation"]["mismatch"]
    assert found["first"]["reference"] == NODE  # the ONNX node whose weight was planted
    assert found["origin"] == "module layer1.1.conv1"
    assert "layer1_layer1.1_conv1_Conv/" in found["node"]  # the TF op the translator named after it
    assert any("first node out of tolerance" in line for line in entry["validation"]["failures"])
    assert any("first node out of tolerance" in line for line in result.failures)
    assert result.to_json()["ok"] is False


@pytest.fixture
def planted_int8(monkeypatch: pytest.MonkeyPatch) -> None:
    """fwx's INT8 ONNX, with one output channel's weight scale of ``NODE`` flipped and tripled."""
    import fwx.exporter.runner as runner

    real = runner.quantize_onnx

    def quantize(src: Path, out: Path, signature: Any, quant: Any, graph: str | None = None) -> Any:
        info = real(src, out, signature, quant, graph)
        model = onnx.load(str(out))
        dq = {n.output[0]: n for n in model.graph.node if n.op_type == "DequantizeLinear"}
        conv = next(n for n in model.graph.node if n.name == NODE)
        init = next(i for i in model.graph.initializer if i.name == dq[conv.input[1]].input[1])
        scale = numpy_helper.to_array(init).copy()
        scale[:4] *= -3.0
        init.CopyFrom(numpy_helper.from_array(scale, init.name))
        onnx.save(model, str(out))
        return info

    monkeypatch.setattr(runner, "quantize_onnx", quantize)


@pytest.mark.usefixtures("planted_int8")
def test_a_failed_int8_onnx_names_the_planted_conv_against_its_float_onnx(net_onnx: Path, tmp_path: Path) -> None:
    from fwx.converters.base import ConvertOptions
    from fwx.quantize.options import QuantOptions

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "calib.npz", x=rng.standard_normal((32, 3, 8, 8)).astype(np.float32))
    quant = QuantOptions("int8", calibration_data=str(tmp_path / "calib.npz"))
    opts = ExportOptions(out=tmp_path / "repo", prefetch="off", keep_failed=True, convert=ConvertOptions(quant=quant))
    result = export(net_onnx, ["onnx"], opts)
    assert result.version_dir is not None
    entry = json.loads((result.version_dir / "fwx.json").read_text())["artifacts"]["onnx"]
    assert entry["precision"] == "int8"  # an ONNX source is quantised, not copied as is
    found = entry["validation"]["mismatch"]
    assert found["node"] == NODE
    assert found["first"]["reference"] == "/layer1/layer1.1/Relu"  # the quantiser folded the ReLU into the Conv
    assert found["first"]["cosine"] < 0.9
    assert all(n["passed"] for n in found["layers"][:3])  # before it: the value after each Q/DQ pair
    assert not any(n["op"] in ("QuantizeLinear", "DequantizeLinear") for n in found["layers"])
