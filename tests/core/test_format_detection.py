from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from fwx.errors import InputError
from fwx.formats import Format, detect_format, parse_format


def test_detects_by_content_not_extension(tmp_path: Path) -> None:
    tfl = tmp_path / "model.bin"
    tfl.write_bytes(b"\x18\x00\x00\x00TFL3" + b"\0" * 16)
    assert detect_format(tfl) is Format.TFLITE
    h5 = tmp_path / "weights.dat"
    h5.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 16)
    assert detect_format(h5) is Format.KERAS
    sm = tmp_path / "sm"
    sm.mkdir()
    (sm / "saved_model.pb").write_bytes(b"x")
    assert detect_format(sm) is Format.SAVEDMODEL


def test_zip_kinds(tmp_path: Path) -> None:
    def mk(name: str, members: list[str]) -> Path:
        p = tmp_path / name
        with zipfile.ZipFile(p, "w") as zf:
            for m in members:
                zf.writestr(m, b"x")
        return p

    assert detect_format(mk("a.pt", ["archive/data.pkl", "archive/version"])) is Format.PYTORCH
    assert detect_format(mk("b.pt", ["m/code/__torch__/x.py", "m/constants.pkl", "m/data.pkl"])) is Format.TORCHSCRIPT
    assert detect_format(mk("c.pt2", ["m/archive_format", "m/models/model.json"])) is Format.PT2
    assert detect_format(mk("d.keras", ["metadata.json", "config.json", "model.weights.h5"])) is Format.KERAS
    with pytest.raises(InputError, match="zip archive of no model format"):
        detect_format(mk("e.zip", ["readme.txt"]))


@pytest.mark.parametrize("content", [b"", b"hello world, not a model"])
def test_bad_files(tmp_path: Path, content: bytes) -> None:
    p = tmp_path / "x.bin"
    p.write_bytes(content)
    with pytest.raises(InputError):
        detect_format(p)


def test_truncated_zip_is_one_line_error(tmp_path: Path) -> None:
    p = tmp_path / "t.pt"
    p.write_bytes(b"PK\x03\x04" + b"\0" * 10)
    with pytest.raises(InputError, match="truncated or corrupt"):
        detect_format(p)


def test_missing_path() -> None:
    with pytest.raises(InputError, match="does not exist"):
        detect_format("/nonexistent/model.onnx")


def test_parse_format_aliases() -> None:
    assert parse_format("TS") is Format.TORCHSCRIPT
    assert parse_format("savedmodel") is Format.SAVEDMODEL
    with pytest.raises(InputError, match="unknown format"):
        parse_format("caffe")
