"""GPU paths (skipped without CUDA: tests/conftest.py adds the skip). Run with ``pytest -m gpu``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fwx.formats import Format
from fwx.runtimes import load_runtime

from .models import MLP_SIG, torch_mlp

pytestmark = pytest.mark.gpu
X = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)


def _cpu(path: Path) -> np.ndarray:
    return load_runtime(Format.ONNX, path).infer({"x": X})["logits"]


def test_onnx_cuda_provider(torch_files: dict[str, Path]) -> None:
    rt = load_runtime(Format.ONNX, torch_files["onnx"], device="cuda")
    assert rt.provider == "CUDAExecutionProvider"
    np.testing.assert_allclose(rt.infer({"x": X})["logits"], _cpu(torch_files["onnx"]), atol=1e-4)


def test_onnx_int8_on_cuda_falls_back_to_cpu_ep(torch_files: dict[str, Path], tmp_path: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    q = tmp_path / "q.onnx"
    quantize_dynamic(str(torch_files["onnx"]), str(q), weight_type=QuantType.QInt8)
    rt = load_runtime(Format.ONNX, q, device="cuda")
    assert rt.provider in ("CPUExecutionProvider", "TensorrtExecutionProvider")
    assert any("INT8" in n for n in rt.notes)  # type: ignore[attr-defined]
    assert rt.infer({"x": X})["logits"].shape == (3, 4)


@pytest.mark.parametrize("fmt", [Format.TORCHSCRIPT, Format.PT2])
def test_torch_formats_on_cuda(torch_files: dict[str, Path], fmt: Format) -> None:
    rt = load_runtime(fmt, torch_files[str(fmt)], device="cuda", signature_hint=MLP_SIG)
    assert rt.provider.startswith("torch:cuda")
    np.testing.assert_allclose(rt.infer({"x": X})["logits"], _cpu(torch_files["onnx"]), atol=1e-3)


def test_savedmodel_on_gpu(keras_files: dict[str, Path]) -> None:
    import tensorflow as tf

    if not tf.config.list_physical_devices("GPU"):
        pytest.skip("this TensorFlow build sees no GPU")
    rt = load_runtime(Format.SAVEDMODEL, keras_files["savedmodel"], device="cuda")
    cpu = load_runtime(Format.SAVEDMODEL, keras_files["savedmodel"])
    assert rt.provider.endswith("GPU:0")
    np.testing.assert_allclose(rt.infer({"x": X})["logits"], cpu.infer({"x": X})["logits"], atol=1e-3)


def test_validate_runtimes_on_cuda(torch_files: dict[str, Path]) -> None:
    from fwx.runtimes.eager_torch import EagerTorchRuntime
    from fwx.validators import validate_runtimes

    ref = EagerTorchRuntime.from_module(torch_mlp(), MLP_SIG, device="cuda")
    cands = {
        "onnx": load_runtime(Format.ONNX, torch_files["onnx"], device="cuda"),
        "pt2": load_runtime(Format.PT2, torch_files["pt2"], device="cuda", signature_hint=MLP_SIG),
    }
    report = validate_runtimes(ref, cands, signature=MLP_SIG)
    assert report.passed, report.failures()
    assert report.for_artifact("onnx")["provider"] == "CUDAExecutionProvider"
    assert report.device.startswith("cuda")
