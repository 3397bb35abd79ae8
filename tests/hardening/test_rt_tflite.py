"""A TFLite op list the scanner cannot walk is refused, never passed on to LiteRT's own reader."""

from __future__ import annotations

from pathlib import Path

import pytest

from fwx.errors import InputError, UnsafeModelError
from fwx.formats import Format
from fwx.safety import check_model

from . import hostile


def _padded(src: Path, dst: Path, codes: int) -> Path:
    """``src`` rewritten with builtin ADD operator codes appended until it holds ``codes`` of them."""
    import flatbuffers
    from tensorflow.lite.python import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(src.read_bytes(), 0))
    while len(model.operatorCodes) < codes:
        code = schema.OperatorCodeT()
        code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.ADD
        code.version = 1
        model.operatorCodes.append(code)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    dst.write_bytes(bytes(builder.Output()))
    return dst


def test_a_custom_op_behind_more_operator_codes_than_the_reader_walks_is_refused(tmp_path: Path) -> None:
    custom = hostile.tflite_custom(tmp_path)
    with pytest.raises(UnsafeModelError, match="custom op"):
        check_model(Format.TFLITE, custom, trust=False)
    # LiteRT reads any number of operator codes; the scanner stops at its limit and used to let the file pass
    hidden = _padded(custom, tmp_path / "hidden.tflite", 10_001)
    with pytest.raises(InputError, match="not a valid TFLite model: 10001 operator codes"):
        check_model(Format.TFLITE, hidden, trust=False)
    check_model(Format.TFLITE, hidden, trust=True)  # trust skips the scan; LiteRT's checks still stand


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b"\x18\x00\x00\x00TFL3", "only 8 bytes"),
        (b"\x18\x00\x00\x00TFL2" + b"\x00" * 32, "TFL3 file identifier"),
        (b"\xff\xff\x00\x00TFL3" + b"\x00" * 64, "root table offset"),
        (b"\x08\x00\x00\x00TFL3" + b"\x00\x00\x00\x7f" + b"\x00" * 40, "vtable"),
    ],
)
def test_an_unreadable_op_list_is_one_input_error(tmp_path: Path, data: bytes, needle: str) -> None:
    path = tmp_path / "junk.tflite"
    path.write_bytes(data)
    with pytest.raises(InputError, match=needle) as caught:
        check_model(Format.TFLITE, path, trust=False)
    assert "\n" not in caught.value.message
