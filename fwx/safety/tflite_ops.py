"""List a ``.tflite`` model's operator codes by reading the FlatBuffer as data.

Custom ops are code the interpreter must be given from outside (a registerer,
a Flex delegate running arbitrary TF ops such as ``WriteFile``): an untrusted
model may use builtin ops only. The reader is a few bounds-checked
``struct`` reads of the schema's ``Model.operator_codes`` (tensorflow/lite/schema/schema.fbs),
so a truncated or crafted file is refused here before the native parser sees it:
a file this reader cannot follow is refused too (failing open would let a custom op
hide behind, say, more operator codes than the reader walks).
"""

from __future__ import annotations

import struct

CUSTOM = 32  # BuiltinOperator.CUSTOM
_MODEL_OPERATOR_CODES = 1
_OPCODE_DEPRECATED_BUILTIN, _OPCODE_CUSTOM_CODE, _OPCODE_BUILTIN = 0, 1, 3
_MAX_OPCODES = 10_000
MIN_SIZE = 32  # the smallest TFLite file; the runtime's structural check (fwx.runtimes.files) uses it too


class FlatBufferError(ValueError):
    """The bytes are not a TFLite FlatBuffer this reader can follow."""


def _u32(buf: bytes, pos: int) -> int:
    if pos < 0 or pos + 4 > len(buf):
        raise FlatBufferError(f"offset {pos} is outside the file ({len(buf)} bytes)")
    return int(struct.unpack_from("<I", buf, pos)[0])


def _field(buf: bytes, table: int, index: int) -> int | None:
    """Absolute position of field ``index`` of the table at ``table``, or None when absent."""
    vtable = table - struct.unpack_from("<i", buf, table)[0] if table + 4 <= len(buf) else -1
    if vtable < 0 or vtable + 4 > len(buf):
        raise FlatBufferError(f"vtable of table at {table} is outside the file")
    vt_size = struct.unpack_from("<H", buf, vtable)[0]
    slot = 4 + 2 * index
    if slot + 2 > vt_size or vtable + slot + 2 > len(buf):
        return None
    rel = struct.unpack_from("<H", buf, vtable + slot)[0]
    return table + rel if rel else None


def _indirect(buf: bytes, pos: int) -> int:
    return pos + _u32(buf, pos)


def _int(buf: bytes, pos: int | None, fmt: str) -> int:
    if pos is None:
        return 0
    if pos + struct.calcsize(fmt) > len(buf):
        raise FlatBufferError(f"field at {pos} is outside the file")
    return int(struct.unpack_from(fmt, buf, pos)[0])


def _string(buf: bytes, pos: int | None) -> str:
    if pos is None:
        return ""
    start = _indirect(buf, pos)
    n = _u32(buf, start)
    if start + 4 + n > len(buf):
        raise FlatBufferError(f"string at {start} runs past the end of the file")
    return buf[start + 4 : start + 4 + n].decode("utf-8", "replace")


def operator_codes(buf: bytes) -> list[tuple[int, str]]:
    """``(builtin_code, custom_code)`` of every operator code in the model."""
    if len(buf) < MIN_SIZE:
        raise FlatBufferError(f"only {len(buf)} bytes")
    if buf[4:8] != b"TFL3":
        raise FlatBufferError("missing the TFL3 file identifier")
    try:
        root = _u32(buf, 0)
        if root + 4 > len(buf):
            raise FlatBufferError("root table offset points past the end of the file")
        vec_field = _field(buf, root, _MODEL_OPERATOR_CODES)
        if vec_field is None:
            return []
        vec = _indirect(buf, vec_field)
        count = _u32(buf, vec)
        if count > _MAX_OPCODES:
            raise FlatBufferError(f"{count} operator codes (limit {_MAX_OPCODES})")
        codes: list[tuple[int, str]] = []
        for i in range(count):
            table = _indirect(buf, vec + 4 + 4 * i)
            old = _int(buf, _field(buf, table, _OPCODE_DEPRECATED_BUILTIN), "<b")
            new = _int(buf, _field(buf, table, _OPCODE_BUILTIN), "<i")
            codes.append((max(old, new), _string(buf, _field(buf, table, _OPCODE_CUSTOM_CODE))))
        return codes
    except struct.error as exc:
        raise FlatBufferError(str(exc)) from exc


def custom_ops(buf: bytes) -> list[str]:
    """Names of the custom (non-builtin) ops the model needs."""
    return [name or "<unnamed custom op>" for code, name in operator_codes(buf) if code == CUSTOM]
