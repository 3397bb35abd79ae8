"""Corrupt, truncated or junk artifacts give one-line InputErrors, never native crashes."""

from __future__ import annotations

from pathlib import Path

import pytest

from fwx.errors import InputError, UsageError
from fwx.formats import Format
from fwx.runtimes import load_runtime


def test_eight_byte_tflite_rejected_before_interpreter(tmp_path: Path) -> None:
    p = tmp_path / "bad.tflite"
    p.write_bytes(b"\x18\x00\x00\x00TFL3")
    with pytest.raises(InputError, match="only 8 bytes"):
        load_runtime(Format.TFLITE, p)


def test_truncated_tflite(tmp_path: Path, keras_files: dict[str, Path]) -> None:
    data = keras_files["tflite"].read_bytes()
    for cut in (40, len(data) // 3):
        p = tmp_path / f"cut{cut}.tflite"
        p.write_bytes(data[:cut])
        with pytest.raises(InputError, match="not a valid TFLite model"):
            load_runtime(Format.TFLITE, p)


def test_tflite_offsets_out_of_range(tmp_path: Path) -> None:
    p = tmp_path / "junk.tflite"
    p.write_bytes(b"\xff\xff\x00\x00TFL3" + b"\x00" * 64)
    with pytest.raises(InputError, match="root table"):
        load_runtime(Format.TFLITE, p)


def test_truncated_onnx(tmp_path: Path, torch_files: dict[str, Path]) -> None:
    p = tmp_path / "cut.onnx"
    p.write_bytes(torch_files["onnx"].read_bytes()[:200])
    with pytest.raises(InputError, match="cannot load"):
        load_runtime(Format.ONNX, p)


def test_junk_torchscript_and_pt2(tmp_path: Path) -> None:
    p = tmp_path / "junk.pt"
    p.write_bytes(b"PK\x03\x04" + b"\x00" * 100)
    with pytest.raises(InputError):
        load_runtime(Format.TORCHSCRIPT, p)
    with pytest.raises(InputError):
        load_runtime(Format.PT2, p)


def test_savedmodel_folder_without_pb(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="saved_model.pb"):
        load_runtime(Format.SAVEDMODEL, tmp_path)


def test_unknown_device(torch_files: dict[str, Path]) -> None:
    with pytest.raises(UsageError, match="unknown device"):
        load_runtime(Format.ONNX, torch_files["onnx"], device="tpu")


def test_cuda_without_gpu_is_clear(torch_files: dict[str, Path]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(UsageError, match="no CUDA GPU"):
        load_runtime(Format.TORCHSCRIPT, torch_files["torchscript"], device="cuda")
