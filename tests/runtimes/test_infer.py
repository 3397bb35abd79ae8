"""Each runtime runs its artifact and matches the framework it came from."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fwx.errors import InputError
from fwx.formats import Format
from fwx.runtimes import load_runtime

from .models import MLP_SIG, keras_mlp, torch_mlp

X1 = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)
X3 = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)


def _torch_ref(x: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        return torch_mlp()(torch.from_numpy(x)).numpy()


@pytest.mark.parametrize("fmt", [Format.ONNX, Format.TORCHSCRIPT, Format.PT2])
def test_torch_artifacts_match_module(torch_files: dict[str, Path], fmt: Format) -> None:
    with load_runtime(fmt, torch_files[str(fmt)], signature_hint=MLP_SIG) as rt:
        for x in (X1, X3, X1):
            out = rt.infer({"x": x})
            assert list(out) == ["logits"]
            np.testing.assert_allclose(out["logits"], _torch_ref(x), atol=1e-5)


def test_linear_known_answer(tmp_path: Path) -> None:
    """Linear(1,1) with w=2, b=1 turns 4 into 9 in every torch-side format."""
    import torch

    from fwx.signature import Signature, TensorSpec

    from .models import export_onnx, export_pt2, export_torchscript

    lin = torch.nn.Linear(1, 1)
    with torch.no_grad():
        lin.weight.fill_(2.0)
        lin.bias.fill_(1.0)
    sig = Signature((TensorSpec("x", "float32", ("N", 1)),), (TensorSpec("y", "float32", ("N", 1)),))
    ex = torch.ones(2, 1)
    paths = {
        Format.ONNX: export_onnx(lin, tmp_path / "l.onnx", sig, ex),
        Format.TORCHSCRIPT: export_torchscript(lin, tmp_path / "l.pt", ex),
        Format.PT2: export_pt2(lin, tmp_path / "l.pt2", ex),
    }
    for fmt, p in paths.items():
        out = load_runtime(fmt, p, signature_hint=sig).infer({"x": np.array([[4.0]], np.float32)})
        assert out["y"].tolist() == [[9.0]], fmt


def test_eager_torch_from_module() -> None:
    from fwx.runtimes.eager_torch import EagerTorchRuntime

    rt = EagerTorchRuntime.from_module(torch_mlp(), MLP_SIG)
    assert rt.signature() == MLP_SIG
    assert rt.format is Format.PYTORCH
    np.testing.assert_allclose(rt.infer({"x": X3})["logits"], _torch_ref(X3), atol=1e-6)
    ro = X3.copy()
    ro.setflags(write=False)  # e.g. np.frombuffer in the server
    np.testing.assert_allclose(rt.infer({"x": ro})["logits"], _torch_ref(X3), atol=1e-6)


def test_eager_torch_load_needs_trust(tmp_path: Path) -> None:
    from fwx.errors import UnsafeModelError

    with pytest.raises(UnsafeModelError):
        load_runtime(Format.PYTORCH, tmp_path / "m.pt", signature_hint=MLP_SIG)


def _keras_ref(x: np.ndarray) -> np.ndarray:
    return np.asarray(keras_mlp()(x, training=False))


@pytest.mark.parametrize("key", ["savedmodel", "tflite"])
def test_tf_artifacts_match_keras(keras_files: dict[str, Path], key: str) -> None:
    fmt = Format.SAVEDMODEL if key == "savedmodel" else Format.TFLITE
    rt = load_runtime(fmt, keras_files[key])
    for x in (X1, X3, X3, X1):  # TFLite resizes on shape change only
        np.testing.assert_allclose(rt.infer({"x": x})["logits"], _keras_ref(x), atol=1e-5)


def test_keras_runtime_matches_model() -> None:
    from fwx.runtimes.eager_keras import KerasRuntime

    rt = KerasRuntime.from_model(keras_mlp(), MLP_SIG)
    np.testing.assert_allclose(rt.infer({"x": X3})["logits"], _keras_ref(X3), atol=1e-6)


def test_tflite_int8_dequantises(keras_files: dict[str, Path]) -> None:
    rt = load_runtime(Format.TFLITE, keras_files["tflite_int8"])
    x = np.random.default_rng(3).standard_normal((16, 8)).astype(np.float32)
    out = rt.infer({"x": x})["logits"]
    assert out.dtype == np.float32
    ref = _keras_ref(x)
    cos = float(np.dot(out.ravel(), ref.ravel()) / (np.linalg.norm(out) * np.linalg.norm(ref)))
    assert cos > 0.98  # raw int8 values would be off by the scale (~0.015) and zero point
    assert np.abs(out - ref).max() < 0.5
    assert np.abs(out - ref).mean() < 0.05


def test_tflite_quantize_roundtrip() -> None:
    from fwx.runtimes.tflite import _IO, dequantize, quantize

    io = _IO("x", 0, np.dtype(np.int8), 0.05, 3)
    x = np.array([-1.0, 0.0, 0.5, 100.0], np.float32)
    q = quantize(x, io)
    assert q.dtype == np.int8
    assert q.tolist() == [-17, 3, 13, 127]
    np.testing.assert_allclose(dequantize(q, io)[:3], x[:3], atol=0.025)


def test_missing_input_is_one_line_error(torch_files: dict[str, Path]) -> None:
    rt = load_runtime(Format.ONNX, torch_files["onnx"])
    with pytest.raises(InputError, match="missing input"):
        rt.infer({"y": X1})


def test_wrong_shape_is_input_error(torch_files: dict[str, Path], keras_files: dict[str, Path]) -> None:
    with pytest.raises(InputError):
        load_runtime(Format.ONNX, torch_files["onnx"]).infer({"x": np.zeros((2, 5), np.float32)})
    with pytest.raises(InputError):
        load_runtime(Format.TFLITE, keras_files["tflite"]).infer({"x": np.zeros((2, 5), np.float32)})
    with pytest.raises(InputError):
        load_runtime(Format.SAVEDMODEL, keras_files["savedmodel"]).infer({"x": np.zeros((2, 5), np.float32)})


def test_onnx_casts_float64_input(torch_files: dict[str, Path]) -> None:
    out = load_runtime(Format.ONNX, torch_files["onnx"]).infer({"x": X1.astype(np.float64)})
    np.testing.assert_allclose(out["logits"], _torch_ref(X1), atol=1e-5)
