"""Locating in INT8 graphs and on the sample that failed.

The INT8 artifacts are those of the quantisation tests (the digits CNN and the
tiny ResNet, quantised by fwx to onnxruntime's QDQ format); a fault is written
into the published file (one output channel's weight scale), and the node named
must be exactly the one whose weight was changed. A clean INT8 model names no
node, even judged far more strictly than its outputs are.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fwx.formats import Format
from fwx.runtimes import load_runtime
from fwx.signature import Signature, parse_tensor_spec
from fwx.validators.locate import RISE, Side, locate
from fwx.validators.mismatch import Mismatch
from fwx.validators.policy import Policy

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
numpy_helper = pytest.importorskip("onnx.numpy_helper")


@pytest.fixture(scope="module")
def digits_int8(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, np.ndarray]:
    from quantize.conftest import SIGNATURE, load_digits_sample

    from fwx.quantize.onnx import quantize_onnx
    from fwx.quantize.options import QuantOptions

    mod = load_digits_sample()
    folder = tmp_path_factory.mktemp("digits")
    x_tr, y_tr, x_te, y_te = mod.load_split()
    calib, ev = mod.write_data(folder, x_tr, x_te, y_te)
    fp32 = mod.export_onnx(mod.train(x_tr, y_tr), folder / "digits.onnx")
    quantize_onnx(fp32, folder / "int8.onnx", SIGNATURE, QuantOptions("int8", calibration_data=str(calib)))
    return fp32, folder / "int8.onnx", x_te


@pytest.fixture(scope="module")
def resnet_int8(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, np.ndarray]:
    from quantize import resnet_digits
    from quantize.conftest import load_digits_sample

    from fwx.quantize.onnx import quantize_onnx
    from fwx.quantize.options import QuantOptions

    x_tr, y_tr, x_te, _ = load_digits_sample().load_split()
    x_tr, x_te = resnet_digits.upscale(x_tr), resnet_digits.upscale(x_te)
    folder = tmp_path_factory.mktemp("resnet")
    fp32 = folder / "fp32.onnx"
    torch.onnx.export(
        resnet_digits.train(x_tr, y_tr).eval(),
        (torch.zeros(1, 1, 32, 32),),
        str(fp32),
        dynamo=False,
        input_names=["image"],
        output_names=["logits"],
        dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}},
        opset_version=17,
    )
    np.savez(folder / "calib.npz", image=x_tr[:64])
    sig = Signature((parse_tensor_spec("image:float32[N,1,32,32]"),), (parse_tensor_spec("logits:float32[N,10]"),))
    quantize_onnx(fp32, folder / "int8.onnx", sig, QuantOptions("int8", calibration_data=str(folder / "calib.npz")))
    return fp32, folder / "int8.onnx", x_te


def _locate(ref: Path, cand: Path, x: np.ndarray, policy: Policy | None = None) -> Mismatch:
    ref_rt = load_runtime(Format.ONNX, ref)
    samples = [{"image": x[:1]}, {"image": x[1:9]}]
    return locate(
        Side(ref_rt, "float", "nchw"),
        Side(load_runtime(Format.ONNX, cand), "int8", "nchw", "int8"),
        samples,
        signature=ref_rt.signature(),
        policy=policy,
    )


def _weighted(path: Path) -> dict[str, str]:
    """Conv/Gemm node -> the per-channel scale initializer of its weight's DequantizeLinear."""
    graph = onnx.load(str(path)).graph
    dq = {n.output[0]: n for n in graph.node if n.op_type == "DequantizeLinear"}
    return {n.name: dq[n.input[1]].input[1] for n in graph.node if n.op_type in ("Conv", "Gemm") and n.input[1] in dq}


def _plant_scale(src: Path, out: Path, scale: str) -> Path:
    model = onnx.load(str(src))
    init = next(i for i in model.graph.initializer if i.name == scale)
    s = numpy_helper.to_array(init).copy()
    s[0] *= -3.0  # one output channel flipped and tripled
    init.CopyFrom(numpy_helper.from_array(s, init.name))
    onnx.save(model, str(out))
    return out


def test_an_int8_conv_is_compared_after_its_qdq_pair(digits_int8: tuple[Path, Path, np.ndarray]) -> None:
    """The QDQ Conv writes '/Relu_output_0' before the folded ReLU; the value the graph carries is after the pair."""
    fp32, int8, x = digits_int8
    m = _locate(fp32, int8, x)
    assert m.node is None, m.line()
    first = m.layers[0]
    assert (first.node, first.op, first.reference) == ("/conv1/Conv", "Conv", "/Relu")
    assert first.cosine > 0.999
    assert all(n.passed for n in m.layers)
    assert not any(n.op in ("QuantizeLinear", "DequantizeLinear") for n in m.layers)


def test_every_planted_int8_weight_fault_is_named_exactly(
    resnet_int8: tuple[Path, Path, np.ndarray], tmp_path: Path
) -> None:
    fp32, int8, x = resnet_int8
    weighted = _weighted(int8)
    assert len(weighted) == 7  # six convolutions and the classifier
    for node, scale in weighted.items():
        m = _locate(fp32, _plant_scale(int8, tmp_path / "bad.onnx", scale), x)
        assert m.node is not None, (node, m.note)
        assert m.node.node == node
        assert m.node.ratio > RISE * m.node.inputs_ratio
        assert all(n.passed for n in m.layers[: m.layers.index(m.node)])


def test_a_clean_int8_model_names_no_node_even_judged_strictly(resnet_int8: tuple[Path, Path, np.ndarray]) -> None:
    """Judged at cosine 0.999 its later nodes leave tolerance, but each only inherits and adds a little error."""
    fp32, int8, x = resnet_int8
    m = _locate(fp32, int8, x, Policy(int8_min_cosine=0.999))
    assert any(not n.passed for n in m.layers)
    assert m.node is None
    assert "grows gradually" in m.note


# --- float graphs: the failing sample, inserted nodes ---------------------------------------------------------


@pytest.fixture(scope="module")
def net_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from validators.test_locate import Net

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("net") / "net.onnx"
    torch.onnx.export(
        Net().eval(),
        (torch.randn(1, 3, 8, 8),),
        str(path),
        dynamo=False,
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "N"}, "y": {0: "N"}},
        opset_version=17,
    )
    return path


def _onnx_locate(good: Path, bad: Path, samples: list[dict[str, np.ndarray]]) -> Mismatch:
    ref = load_runtime(Format.ONNX, good)
    return locate(
        Side(ref, "float", "nchw"), Side(load_runtime(Format.ONNX, bad), "bad"), samples, signature=ref.signature()
    )


def test_the_fault_is_located_on_the_sample_that_fails(net_onnx: Path, tmp_path: Path) -> None:
    """On black images the stem's output is its bias alone: a weight fault shows only on the last sample."""
    from validators.test_locate import _plant_onnx

    bad = _plant_onnx(net_onnx, tmp_path / "bad.onnx", "/stem/Conv")
    rng = np.random.default_rng(0)
    samples = [{"x": np.zeros((b, 3, 8, 8), np.float32)} for b in (1, 3, 2)]
    samples.append({"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)})  # a --validation-data sample
    m = _onnx_locate(net_onnx, bad, samples)
    assert m.node is not None, m.note
    assert m.node.node == "/stem/Conv"
    assert m.samples == "sample 4 of 4 (where the outputs disagree most)"
    assert "traced on sample 4 of 4" in m.line()


def _insert_mul(src: Path, out: Path, after: str) -> Path:
    """A Mul by 1.5 on ``after``'s output, read by every node that read it."""
    model = onnx.load(str(src))
    tensor = next(n for n in model.graph.node if n.name == after).output[0]
    for node in model.graph.node:
        for k, name in enumerate(node.input):
            if name == tensor:
                node.input[k] = "planted_scaled"
    model.graph.initializer.append(numpy_helper.from_array(np.array(1.5, np.float32), "planted_factor"))
    at = [n.name for n in model.graph.node].index(after) + 1
    model.graph.node.insert(at, onnx.helper.make_node("Mul", [tensor, "planted_factor"], ["planted_scaled"], "planted"))
    onnx.save(model, str(out))
    return out


def test_a_node_the_reference_does_not_have_is_named(net_onnx: Path, tmp_path: Path) -> None:
    bad = _insert_mul(net_onnx, tmp_path / "inserted.onnx", "/layer1/layer1.0/Relu")
    rng = np.random.default_rng(0)
    m = _onnx_locate(net_onnx, bad, [{"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)}])
    assert m.node is not None, m.note
    assert m.node.node == "/layer1/layer1.0/Add"
    assert m.inserted == ["'planted' (Mul)"]
    assert "after 'planted' (Mul), which the reference does not have" in m.line()


def _clip_input(src: Path, out: Path, bound: float) -> Path:
    """A Clip to [-bound, bound] on the model's input: invisible on standard-normal samples."""
    model = onnx.load(str(src))
    for node in model.graph.node:
        for k, name in enumerate(node.input):
            if name == "x":
                node.input[k] = "planted_clipped"
    for name, value in (("planted_lo", -bound), ("planted_hi", bound)):
        model.graph.initializer.append(numpy_helper.from_array(np.array(value, np.float32), name))
    clip = onnx.helper.make_node("Clip", ["x", "planted_lo", "planted_hi"], ["planted_clipped"], "planted")
    model.graph.node.insert(0, clip)
    onnx.save(model, str(out))
    return out


def test_a_failure_seen_only_on_a_validation_data_sample_is_located_on_it(net_onnx: Path, tmp_path: Path) -> None:
    from fwx.validators import validate
    from fwx.validators.pipeline import ValidateOptions

    bad = _clip_input(net_onnx, tmp_path / "clipped.onnx", 6.0)
    bright = np.full((1, 3, 8, 8), 9.0, np.float32)
    bright[0, 0, ::2] = -9.0
    np.savez(tmp_path / "extra.npz", x=bright)
    plain = validate([net_onnx, bad])
    assert plain.passed  # the generated samples never reach the clip
    report = validate([net_onnx, bad], ValidateOptions(validation_data=tmp_path / "extra.npz"))
    m = report.artifact("clipped.onnx").mismatch
    assert m is not None
    assert m.node is not None, m.note
    assert m.node.node == "/stem/Conv"
    assert m.inserted == ["'planted' (Clip)"]
    assert m.samples.startswith(f"sample {len(report.inputs)} of {len(report.inputs)}")


def _remove(src: Path, out: Path, name: str) -> Path:
    """``name`` taken out of the graph: its consumers read its input instead."""
    model = onnx.load(str(src))
    node = next(n for n in model.graph.node if n.name == name)
    for other in model.graph.node:
        for k, tensor in enumerate(other.input):
            if tensor == node.output[0]:
                other.input[k] = node.input[0]
    model.graph.node.remove(node)
    onnx.save(model, str(out))
    return out


def test_a_node_the_artifact_lost_is_named(net_onnx: Path, tmp_path: Path) -> None:
    bad = _remove(net_onnx, tmp_path / "removed.onnx", "/layer1/layer1.0/Relu")
    rng = np.random.default_rng(0)
    m = _onnx_locate(net_onnx, bad, [{"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)}])
    assert m.node is not None, m.note
    assert m.node.node == "/layer1/layer1.0/Add"
    assert (m.inserted, m.removed) == ([], ["'/layer1/layer1.0/Relu' (Relu)"])
    assert "the reference's '/layer1/layer1.0/Relu' (Relu) before it is missing" in m.line()
