"""Reading model files as data, before any runtime or converter touches them.

One loader for ONNX files (one error message for a file that is not ONNX) and
one structural check for TFLite flatbuffers (a truncated file is a one-line
``InputError``, not a native crash). Used by sources, converters, the exporter's
read-back, ``fwx inspect`` and the runtimes themselves.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fwx.errors import CORRUPT_HINT as CORRUPT_HINT
from fwx.errors import InputError, first_line
from fwx.frameworks import require
from fwx.safety.tflite_ops import MIN_SIZE


def load_onnx(path: str | Path, *, external_data: bool = False) -> Any:
    """``path`` as an ``onnx.ModelProto`` (weights in external files only with ``external_data``)."""
    onnx = require("onnx", "reading ONNX models")
    try:
        return onnx.load(str(path), load_external_data=external_data)
    except Exception as exc:  # noqa: BLE001 - protobuf DecodeError, IO errors and friends
        raise InputError(f"cannot read {path} as ONNX: {first_line(exc)}", hint=CORRUPT_HINT) from exc


def onnx_opset(model: Any) -> int | None:
    """The default-domain opset of a loaded ONNX model."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


_MODEL_VECTOR_FIELDS = (1, 2, 4)  # operator_codes, subgraphs, buffers in schema.fbs Model


def check_tflite_file(path: Path) -> None:
    """Reject files the native loader might mis-read: too small, wrong identifier, offsets out of range."""
    size = path.stat().st_size

    def bad(why: str) -> InputError:
        return InputError(f"{path} is not a valid TFLite model: {why}", hint=CORRUPT_HINT)

    if size < MIN_SIZE:
        raise bad(f"only {size} bytes")
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        _check_offsets(data, size, bad)


def _check_offsets(data: mmap.mmap, size: int, bad: Callable[[str], InputError]) -> None:
    if data[4:8] != b"TFL3":
        raise bad("missing the TFL3 file identifier")
    root = struct.unpack_from("<I", data, 0)[0]
    if root + 4 > size:
        raise bad("root table offset points past the end of the file")
    vtable = root - struct.unpack_from("<i", data, root)[0]
    if not 0 <= vtable <= size - 4:
        raise bad("vtable offset out of range")
    vt_size = struct.unpack_from("<H", data, vtable)[0]
    if vt_size < 4 or vtable + vt_size > size:
        raise bad("vtable size out of range")
    for field in _MODEL_VECTOR_FIELDS:
        slot = 4 + 2 * field
        if slot + 2 > vt_size:
            continue
        off = struct.unpack_from("<H", data, vtable + slot)[0]
        if off == 0:
            continue
        loc = root + off
        if loc + 4 > size:
            raise bad("table field out of range")
        vec = loc + struct.unpack_from("<I", data, loc)[0]
        if vec + 4 > size or vec + 4 + 4 * struct.unpack_from("<I", data, vec)[0] > size:
            raise bad("a vector runs past the end of the file (truncated?)")
