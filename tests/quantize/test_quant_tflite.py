"""TFLite full-integer, dynamic-range and fp16 from the digits SavedModel; --strict-int8."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fwx.errors import UnsupportedOpsError
from fwx.quantize import QuantInfo, QuantOptions
from fwx.quantize.tflite import convert_quantized
from fwx.signature import Signature, parse_tensor_spec

from .conftest import SIGNATURE, Digits

pytest.importorskip("tensorflow")
litert = pytest.importorskip("ai_edge_litert.interpreter")

BAR_POINTS = 0.5


def _convert(sm: Path, out: Path, kind: str = "int8", sig: Signature = SIGNATURE, **quant: object) -> QuantInfo:
    return convert_quantized(sm, out, sig, QuantOptions(kind, **quant))


def _io_dtypes(path: Path) -> tuple[str, str]:
    interp = litert.Interpreter(model_path=str(path))
    return interp.get_input_details()[0]["dtype"].__name__, interp.get_output_details()[0]["dtype"].__name__


@pytest.mark.slow
def test_full_integer_meets_the_accuracy_and_size_bar(digits: Digits, digits_savedmodel: Path, tmp_path: Path) -> None:
    out = tmp_path / "model.tflite"
    info = _convert(digits_savedmodel, out, calibration_data=digits.calib, eval_data=digits.eval)
    ev = info.eval
    assert ev is not None
    assert ev.samples == len(digits.y_test)
    assert ev.accuracy_float == pytest.approx(digits.float_accuracy, abs=1 / len(digits.y_test))  # Keras copy == torch
    assert ev.drop_points <= BAR_POINTS, info.to_json()
    assert info.size_ratio >= 3.5, (info.size_before, info.size_after)
    assert _io_dtypes(out) == ("int8", "int8")  # integer end to end, not float I/O around int8 ops
    assert info.float_ops == {}
    assert info.io["image"]["dtype"] == "int8"
    assert info.io["image"]["scale"] > 0
    assert (info.method, info.samples, info.granularity, info.io_dtype) == ("minmax", 200, "per-channel", "int8")


@pytest.mark.slow
def test_io_dtype_uint8_and_float32(digits: Digits, digits_savedmodel: Path, tmp_path: Path) -> None:
    for io in ("uint8", "float32"):
        out = tmp_path / f"{io}.tflite"
        info = _convert(digits_savedmodel, out, calibration_data=digits.calib, samples=32, io_dtype=io)
        assert _io_dtypes(out) == (io, io)
        assert info.io_dtype == io
        assert info.float_ops == {}


@pytest.mark.slow
def test_dynamic_range_and_fp16(digits: Digits, digits_savedmodel: Path, tmp_path: Path) -> None:
    dyn = _convert(digits_savedmodel, tmp_path / "dyn.tflite", "int8-dynamic", eval_data=digits.eval)
    assert dyn.size_ratio >= 3.5
    assert dyn.eval.drop_points <= BAR_POINTS
    assert dyn.io_dtype == "float32"
    half = _convert(digits_savedmodel, tmp_path / "half.tflite", "fp16", eval_data=digits.eval)
    assert 1.8 <= half.size_ratio <= 2.2
    assert half.eval.cosine_min > 0.9999
    assert _io_dtypes(tmp_path / "half.tflite") == ("float32", "float32")


@pytest.fixture(scope="module")
def sin_savedmodel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Dense -> SIN: TFLite has no int8 kernel for SIN."""
    import tensorflow as tf

    class SinModel(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = tf.Variable(np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32))

        @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.float32, name="x")])
        def serve(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"y": tf.math.sin(tf.matmul(x, self.w))}

    path = tmp_path_factory.mktemp("sin") / "sm"
    model = SinModel()
    tf.saved_model.save(model, str(path), signatures={"serving_default": model.serve})
    return path


@pytest.mark.slow
def test_strict_int8_refuses_float_ops_and_lenient_lists_them(sin_savedmodel: Path, tmp_path: Path) -> None:
    sig = Signature((parse_tensor_spec("x:float32[N,16]"),), (parse_tensor_spec("y:float32[N,8]"),))
    lenient = _convert(sin_savedmodel, tmp_path / "lenient.tflite", sig=sig, calibration_data="random", samples=16)
    assert lenient.float_ops == {"SIN": 1}
    out = tmp_path / "strict.tflite"
    with pytest.raises(UnsupportedOpsError, match="SIN") as exc:
        _convert(sin_savedmodel, out, sig=sig, calibration_data="random", samples=16, strict=True)
    assert exc.value.ops == ["SIN"]
    assert "--strict-int8" in str(exc.value)
    assert not out.exists()
