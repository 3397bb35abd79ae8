"""Every mistake a user can make with --quantize is one line (+ hint), raised before any heavy work."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fwx.errors import FwxError, InputError, UsageError
from fwx.formats import Format
from fwx.quantize import check_options
from fwx.quantize.options import RANDOM_WARNING, QuantOptions, quant_options
from fwx.signature import Signature

from .conftest import SIGNATURE


def _opts(
    kind: str | None = "int8", opset: int | None = None, **quant: object
) -> tuple[QuantOptions | None, int | None]:
    """The flags as ``fwx export`` builds them, with the ``--opset`` asked for."""
    return quant_options(kind, **quant), opset


def check(target: Format, opts: tuple[QuantOptions | None, int | None], sig: Signature | None = None) -> list[str]:
    return check_options(target, opts[0], sig, opset=opts[1])


def _one_line(exc: pytest.ExceptionInfo[FwxError], *needles: str) -> None:
    text = str(exc.value)
    assert "\n" not in exc.value.message, text
    assert exc.value.hint, text
    for needle in needles:
        assert needle in text, text


@pytest.fixture
def good_npz(tmp_path: Path) -> Path:
    path = tmp_path / "calib.npz"
    np.savez(path, image=np.zeros((4, 1, 8, 8), np.float32))
    return path


def test_good_data_passes_with_no_warning(good_npz: Path) -> None:
    assert check(Format.ONNX, _opts(calibration_data=good_npz), SIGNATURE) == []


@pytest.mark.parametrize(
    ("arrays", "needles"),
    [
        ({"pixels": np.zeros((4, 1, 8, 8), np.float32)}, ["no samples for input(s) image", "it has: pixels"]),
        ({"image": np.zeros((4, 1, 8, 8), np.float32), "mask": np.zeros((4, 2))}, ["does not take: mask"]),
        ({"image": np.zeros((4, 8, 8), np.float32)}, ["shape [8, 8]", "image:float32[N,1,8,8]"]),
        ({"image": np.zeros((4, 3, 8, 8), np.float32)}, ["shape [3, 8, 8]"]),
        ({"image": np.zeros((4, 1, 8, 8), np.int64)}, ["'image' is int64", "takes float32"]),
        ({"image": np.zeros((0, 1, 8, 8), np.float32)}, ["holds no samples"]),
    ],
)
def test_calibration_data_that_does_not_fit_the_signature(tmp_path: Path, arrays: dict, needles: list[str]) -> None:
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with pytest.raises(InputError) as exc:
        check(Format.ONNX, _opts(calibration_data=path), SIGNATURE)
    _one_line(exc, *needles)


def test_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError) as exc:
        check(Format.TFLITE, _opts(calibration_data=tmp_path), SIGNATURE)
    _one_line(exc, "is empty")


def test_unreadable_image(tmp_path: Path) -> None:
    from PIL import Image

    Image.fromarray(np.zeros((8, 8), np.uint8)).save(tmp_path / "ok.png")
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    with pytest.raises(InputError) as exc:
        check(Format.ONNX, _opts(calibration_data=tmp_path), SIGNATURE)
    _one_line(exc, "cannot read image", "broken.png")


def test_missing_path_and_wrong_file_type(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        check(Format.ONNX, _opts(calibration_data=tmp_path / "nope.npz"), SIGNATURE)
    (tmp_path / "data.csv").write_text("1,2,3\n")
    with pytest.raises(InputError, match="not an .npz file"):
        check(Format.ONNX, _opts(calibration_data=tmp_path / "data.csv"), SIGNATURE)
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04 garbage")
    with pytest.raises(InputError, match="cannot read"):
        check(Format.ONNX, _opts(calibration_data=tmp_path / "junk.npz"), SIGNATURE)


@pytest.mark.parametrize("target", [Format.TORCHSCRIPT, Format.PT2, Format.SAVEDMODEL])
def test_quantize_on_a_format_that_cannot_hold_it(target: Format, good_npz: Path) -> None:
    with pytest.raises(UsageError) as exc:
        check(target, _opts(calibration_data=good_npz))
    _one_line(exc, f"cannot be applied to {target}", "onnx, tflite")


def test_opset_too_low_is_refused_and_10_to_12_warns(good_npz: Path) -> None:
    with pytest.raises(UsageError) as exc:
        check(Format.ONNX, _opts(opset=9, calibration_data=good_npz))
    _one_line(exc, "opset >= 10", "--opset 9")
    warnings = check(Format.ONNX, _opts(opset=11, calibration_data=good_npz))
    assert len(warnings) == 1
    assert "per-tensor" in warnings[0]
    assert check(Format.ONNX, _opts(opset=13, calibration_data=good_npz)) == []
    assert check(Format.ONNX, _opts("fp16", opset=9)) == []  # fp16 needs no QuantizeLinear


def test_flag_mistakes() -> None:
    with pytest.raises(UsageError, match="needs calibration data"):
        check(Format.ONNX, _opts())
    with pytest.raises(UsageError, match="unknown --quantize 'int4'"):
        check(Format.ONNX, _opts("int4"))
    with pytest.raises(UsageError, match="unknown --calibration-method"):
        check(Format.ONNX, _opts(calibration_data="random", method="kl"))
    with pytest.raises(UsageError, match="unknown --io-dtype"):
        check(Format.TFLITE, _opts(calibration_data="random", io_dtype="int4"))
    with pytest.raises(UsageError, match="positive integer"):
        check(Format.ONNX, _opts(calibration_data="random", samples=0))
    with pytest.raises(UsageError, match="--calibration-data needs --quantize"):
        check(Format.ONNX, _opts(None, calibration_data="x.npz"))
    with pytest.raises(InputError, match="--eval-data cannot be random"):
        check(Format.ONNX, _opts("fp16", eval_data="random"))


def test_random_calibration_is_loud(capsys: pytest.CaptureFixture[str]) -> None:
    warnings = check(Format.TFLITE, _opts(calibration_data="random"), SIGNATURE)
    assert warnings == [RANDOM_WARNING]
    assert "RANDOM" in capsys.readouterr().err


def test_flags_that_do_not_apply_warn(good_npz: Path) -> None:
    w = check(Format.TFLITE, _opts(calibration_data=good_npz, method="entropy"))
    assert any("min/max" in x for x in w)
    w = check(Format.ONNX, _opts(calibration_data=good_npz, io_dtype="uint8", strict=True))
    assert len(w) == 2
    assert any("ignored" in x for x in check(Format.ONNX, _opts("int8-dynamic", calibration_data=good_npz)))
