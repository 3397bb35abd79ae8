"""ONNX int8 (QDQ), int8-dynamic and fp16 on the digits CNN, measured on its held-out split."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fwx.errors import InputError, UsageError
from fwx.quantize import QuantInfo
from fwx.quantize.onnx import quantize_onnx
from fwx.quantize.options import RANDOM_WARNING, QuantOptions

from .conftest import SIGNATURE, Digits

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

BAR_POINTS = 0.5  # the bar: at most 0.5 point of top-1 lost


def _quant(digits: Digits, out: Path, kind: str = "int8", **quant: object) -> QuantInfo:
    quant.setdefault("eval_data", digits.eval)
    if kind == "int8":
        quant.setdefault("calibration_data", digits.calib)
    return quantize_onnx(digits.onnx, out, SIGNATURE, QuantOptions(kind, **quant))  # type: ignore[arg-type]


def _ops(path: Path) -> set[str]:
    return {n.op_type for n in onnx.load(str(path)).graph.node}


def test_int8_meets_the_accuracy_and_size_bar(digits: Digits, tmp_path: Path) -> None:
    out = tmp_path / "model.onnx"
    info = _quant(digits, out)
    ev = info.eval
    assert ev is not None
    assert ev.samples == len(digits.y_test)
    assert ev.accuracy_float == pytest.approx(digits.float_accuracy, abs=1e-6)  # ONNX float == torch
    assert ev.accuracy_float > 0.95
    assert ev.drop_points is not None
    assert ev.drop_points <= BAR_POINTS, info.to_json()
    assert ev.agreement >= 0.99
    assert ev.cosine_mean >= 0.99
    assert info.size_ratio >= 3.5, (info.size_before, info.size_after)
    assert (info.method, info.samples, info.granularity, info.io_dtype) == ("minmax", 200, "per-channel", "float32")
    assert {"QuantizeLinear", "DequantizeLinear"} <= _ops(out)
    assert info.warnings == []
    data = json.loads(json.dumps(info.to_json()))  # what fwx.json stores
    assert data["eval"]["drop_points"] == ev.drop_points
    assert data["size_ratio"] == info.size_ratio
    assert QuantInfo.from_json(data).eval == ev


def test_random_calibration_is_recorded_as_such(digits: Digits, tmp_path: Path) -> None:
    info = _quant(digits, tmp_path / "r.onnx", calibration_data="random", samples=32)
    assert info.to_json()["warnings"][0] == RANDOM_WARNING
    assert info.samples == 32
    assert info.calibration_data == "random calibration data"
    assert info.eval is not None
    assert info.eval.cosine_min is not None
    # Raw 0..16 pixels are far outside standard-normal noise: the ranges come out wrong and it shows.
    assert info.eval.drop_points > BAR_POINTS
    assert any("lost" in w and "points of top-1" in w for w in info.warnings)


@pytest.mark.parametrize("method", ["entropy", "percentile"])
def test_histogram_methods_calibrate_stride_by_stride(digits: Digits, tmp_path: Path, method: str) -> None:
    # ORT's histogram calibrators stack a stride's outputs with np.asarray, so 90 samples in batches of
    # 16+16+16 | 16+16+10 would crash them; fwx uses 6 batches of 15, 3 per stride.
    info = _quant(digits, tmp_path / f"{method}.onnx", method=method, samples=90)
    assert info.method == method
    assert info.samples == 90
    assert info.eval is not None
    assert info.eval.drop_points <= 1.0
    assert info.eval.agreement >= 0.98


def test_dynamic_and_fp16(digits: Digits, tmp_path: Path) -> None:
    dyn = _quant(digits, tmp_path / "dyn.onnx", "int8-dynamic")
    assert dyn.size_ratio >= 3.5
    assert "DynamicQuantizeLinear" in _ops(tmp_path / "dyn.onnx")
    assert dyn.eval.drop_points <= BAR_POINTS
    half = _quant(digits, tmp_path / "half.onnx", "fp16")
    assert 1.8 <= half.size_ratio <= 2.2
    assert half.eval.cosine_min > 0.9999
    assert half.precision == "fp16"
    model = onnx.load(str(tmp_path / "half.onnx"))
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT  # I/O stays float32


def test_image_folder_calibration_and_labelled_eval(digits: Digits, tmp_path: Path) -> None:
    from PIL import Image

    for split, xs, ys in (("calib", digits.x_train[:64], np.zeros(64, int)), ("eval", digits.x_test, digits.y_test)):
        for i, (img, y) in enumerate(zip(xs, ys, strict=True)):
            folder = tmp_path / split / str(y)
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.uint8(np.round(img[0] / 16 * 255))).save(folder / f"{i:04d}.png")
    info = _quant(
        digits,
        tmp_path / "img.onnx",
        calibration_data=tmp_path / "calib",
        eval_data=tmp_path / "eval",
        preprocess="scale=16/255,layout=nchw",
    )
    assert info.samples == 64
    assert "calib" in info.calibration_data
    assert info.eval.accuracy_float > 0.95
    assert info.eval.drop_points <= BAR_POINTS


def test_low_opsets(digits: Digits, tmp_path: Path) -> None:
    old = digits.module.export_onnx(digits.model, tmp_path / "op11.onnx", opset=11)
    info = quantize_onnx(
        old,
        tmp_path / "q11.onnx",
        SIGNATURE,
        QuantOptions("int8", calibration_data=str(digits.calib), samples=64),
    )
    assert info.granularity == "per-tensor"
    assert any("per-tensor" in w for w in info.warnings)
    too_old = digits.module.export_onnx(digits.model, tmp_path / "op9.onnx", opset=9)
    out = tmp_path / "q9.onnx"
    with pytest.raises(UsageError, match=r"opset >= 10 .* the model has 9"):
        quantize_onnx(too_old, out, SIGNATURE, QuantOptions("int8", calibration_data="random"))
    assert not out.exists()


def test_bad_data_fails_before_writing(digits: Digits, tmp_path: Path) -> None:
    bad = tmp_path / "bad.npz"
    np.savez(bad, image=np.zeros((4, 1, 8, 8), np.int32))
    out = tmp_path / "never.onnx"
    with pytest.raises(InputError, match="is int32"):
        _quant(digits, out, calibration_data=bad)
    assert not out.exists()
