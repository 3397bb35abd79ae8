"""``fwx export --quantize int8`` through the CLI on a ResNet-style network: both formats, --per-tensor, the summary.

Also the pieces that make an INT8 failure readable: a TFLite model whose int8
range a constant swamped is refused with the op named (before LiteRT is asked
to run it), and LiteRT's run-together error text is split into its messages.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from exporter.fixtures import _reset_ui, cli
from exporter.fixtures import torch_files as torch_files

from fwx.errors import ExportError
from fwx.exporter.summary import check_text
from fwx.runtimes.tflite import litert_message

from . import resnet_digits
from .conftest import Digits

__all__ = ["_reset_ui", "cli", "torch_files"]

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def resnet(digits: Digits, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, float]:
    return resnet_digits.write(tmp_path_factory.mktemp("resnet"), digits)


@pytest.mark.slow
@pytest.mark.e2e
def test_resnet_int8_per_tensor_reaches_onnx_and_tflite(
    cli, resnet: tuple[Path, Path, Path, float], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per-tensor INT8 of the ResNet reaches both formats and is judged by one verdict: the budget's.

    The network is trained here, and float32 training rounds differently on AVX2
    and AVX-512 kernels: the network an AVX2-only EPYC trains agrees 98.4-99.6%
    with its float model on the 450 held-out digits after per-tensor INT8, and
    flips 2 of the 34 validation rows. A 99% gate on those rows would pass here
    and fail there; the budget judges on the held-out split, on any CPU.
    """
    pytest.importorskip("tensorflow")
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    weights, calib, evaluation, accuracy = resnet
    assert accuracy > 0.85  # trained: INT8 numbers on random weights say nothing
    res = cli(
        "export", weights, "--model-class", "resnet_digits:build", "--input", "image:float32[N,1,32,32]",
        "--to", "onnx,tflite", "--quantize", "int8", "--calibration-data", calib, "--per-tensor",
        "--eval-data", evaluation, "--min-agreement", "0.97", "--out", tmp_path,
    )  # fmt: skip
    assert res.code == 0, res.err
    version = tmp_path / "resnet" / "1"
    manifest = json.loads((version / "fwx.json").read_text())
    for fmt in ("onnx", "tflite"):
        assert manifest["artifacts"][fmt]["quantization"]["granularity"] == "per-tensor"
        assert manifest["artifacts"][fmt]["validation"]["passed"] is True
    assert re.findall(r"weights +per-tensor, (\d)-bit", res.out) == ["7", "8"]  # ONNX 7-bit: no saturation anywhere
    # the check column says what the INT8 gate judged (cosine, top-1 agreement), not an element-wise difference
    rows = [line for line in res.out.splitlines() if line.startswith(("onnx ", "tflite ")) and "model." in line]
    assert len(rows) == 2
    # the check column says what judged the artifact: the budget, on the held-out split, not the 34 validation rows
    # (searched on one half of the 450 eval digits, its cost quoted on the other half, which the search never saw)
    verdict = "PASS (budget agreement >= 0.97 met on 225 samples searched; 225 held out: drop "
    assert all(verdict in r and "max abs" not in r for r in rows), rows
    scales = _weight_scale_sizes(version / "model.onnx")
    assert scales
    assert set(scales) == {1}, scales  # one scale per weight tensor: per-tensor, as asked


def _weight_scale_sizes(path: Path) -> list[int]:
    """The number of scales of every DequantizeLinear fed by a constant int8 weight."""
    model = onnx.load(str(path))
    inits = {i.name: i for i in model.graph.initializer}
    sizes = []
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.input[0] in inits and inits[node.input[0]].data_type == 3:
            sizes.append(int(np.prod(inits[node.input[1]].dims)) if inits[node.input[1]].dims else 1)
    return sizes


def test_tflite_int8_with_a_swamped_range_is_refused_naming_the_op(tmp_path: Path) -> None:
    """A max-pool padded with float32's lowest value: the calibrated range of the pad's input becomes ~1e36."""
    tf = pytest.importorskip("tensorflow")
    pytest.importorskip("ai_edge_litert")
    from fwx.quantize import QuantOptions
    from fwx.quantize.tflite import convert_quantized
    from fwx.signature import Signature, parse_tensor_spec

    kernel = tf.constant(np.random.default_rng(0).normal(size=(3, 3, 1, 4)).astype(np.float32))

    class Padded(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 1], tf.float32, name="image")])
        def __call__(self, image: tf.Tensor) -> dict[str, tf.Tensor]:
            x = tf.nn.relu(tf.nn.conv2d(image, kernel, 1, "SAME"))
            x = tf.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]], constant_values=float(np.finfo(np.float32).min))
            return {"y": tf.reduce_mean(tf.nn.max_pool2d(x, 3, 2, "VALID"), axis=[1, 2])}

    module = Padded()
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures={"serving_default": module.__call__})
    sig = Signature((parse_tensor_spec("image:float32[N,8,8,1]"),), (parse_tensor_spec("y:float32[N,4]"),))
    q = QuantOptions("int8", calibration_data="random", samples=8)
    with pytest.raises(ExportError, match=r"swamped the calibrated range") as exc:
        convert_quantized(tmp_path / "sm", tmp_path / "m.tflite", sig, q)
    assert "\n" not in exc.value.message


def test_litert_text_is_split_into_its_messages() -> None:
    raw = RuntimeError(
        "failed to create XNNPACK runtimeNode number 38 (TfLiteXNNPackDelegate) failed to prepare."
        "Node number 38 (TfLiteXNNPackDelegate) failed to prepare."
    )
    assert litert_message(raw) == (
        "failed to create XNNPACK runtime; Node number 38 (TfLiteXNNPackDelegate) failed to prepare"
    )


def test_check_column_names_what_was_judged() -> None:
    out = {"max_abs": 0.64, "cosine": 0.99991, "top1": 1.0, "atol": None}
    assert check_text({"passed": True, "precision": "int8", "outputs": {"y": out}}) == (
        "PASS (cosine 0.999910, top-1 100.0%)"
    )
    assert check_text({"passed": True, "precision": "fp32", "outputs": {"y": {**out, "atol": 1e-4}}}) == (
        "PASS (max abs 6.4e-01)"
    )
    assert check_text({"skipped": True}) == "not validated"
