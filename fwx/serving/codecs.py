"""Tensor bytes <-> numpy, shared by REST and gRPC, safe against hostile sizes.

Every size is computed with Python ints (no overflow) and compared with the
bytes actually received before ``np.frombuffer`` touches them, so a shape of
``[2**62, 4]`` or ``[-1]`` is a 400 naming the tensor, never a 500 or an OOM.
Raw numeric data is decoded without a copy.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from fwx.errors import InputError, first_line
from fwx.serving.json_values import numeric_array
from fwx.signature import FROM_KSERVE, KSERVE_DTYPES

#: Largest rank and element count accepted in one tensor (numpy caps rank at 64).
MAX_RANK = 32
MAX_ELEMENTS = 2**31

_NP_DTYPES: dict[str, np.dtype] = {
    k: np.dtype(v).newbyteorder("<") for k, v in FROM_KSERVE.items() if v not in ("bytes", "bfloat16")
}
_KSERVE_OF_NP: dict[np.dtype, str] = {
    np.dtype(k): v for k, v in KSERVE_DTYPES.items() if k not in ("bytes", "bfloat16")
}
_LEN = struct.Struct("<I")


def np_dtype(name: str, datatype: str) -> np.dtype:
    """The numpy dtype of a KServe datatype (``object`` for BYTES)."""
    if datatype == "BYTES":
        return np.dtype(object)
    dt = _NP_DTYPES.get(datatype)
    if dt is None:
        known = ", ".join([*_NP_DTYPES, "BYTES"])
        raise InputError(f"input {name!r}: unsupported datatype {datatype!r}", hint=f"use one of: {known}")
    return dt


def element_count(name: str, shape: Sequence[Any]) -> int:
    """prod(shape) with Python ints, after checking every dim is a non-negative int."""
    if not isinstance(shape, (list, tuple)):
        raise InputError(f"input {name!r}: shape must be a list of integers, got {type(shape).__name__}")
    if len(shape) > MAX_RANK:
        raise InputError(f"input {name!r}: rank {len(shape)} exceeds {MAX_RANK}")
    count = extent = 1
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, int):
            raise InputError(f"input {name!r}: shape {list(shape)} holds a non-integer dimension {d!r}")
        if d < 0:
            raise InputError(
                f"input {name!r}: shape {list(shape)} has a negative dimension",
                hint="send the concrete shape of this request's tensor",
            )
        count *= d
        extent *= max(d, 1)
    if count > MAX_ELEMENTS:
        raise InputError(f"input {name!r}: shape {list(shape)} has {count} elements, over the {MAX_ELEMENTS} limit")
    if extent > MAX_ELEMENTS:  # also with a 0 somewhere: numpy cannot even shape an empty [0, 2**62]
        raise InputError(f"input {name!r}: shape {list(shape)} spans more than the {MAX_ELEMENTS}-element limit")
    return count


def decode_raw(name: str, datatype: str, shape: Sequence[int], buf: bytes | bytearray | memoryview) -> np.ndarray:
    """Raw little-endian bytes (binary extension / gRPC raw contents) -> array of ``shape``."""
    count = element_count(name, shape)
    if datatype == "BYTES":
        return _decode_bytes(name, shape, count, buf)
    dt = np_dtype(name, datatype)
    expected = count * dt.itemsize
    if expected != len(buf):
        raise InputError(
            f"input {name!r}: shape {list(shape)} of {datatype} needs {expected} bytes, got {len(buf)}",
            hint="the byte size must equal prod(shape) * element size",
        )
    return np.frombuffer(buf, dtype=dt).reshape(shape)


def _decode_bytes(name: str, shape: Sequence[int], count: int, buf: bytes | bytearray | memoryview) -> np.ndarray:
    view = memoryview(buf)
    pos, end = 0, len(view)
    if count * 4 > end:  # before allocating: a lying shape must not cost 8 bytes per claimed element
        raise InputError(
            f"input {name!r}: shape {list(shape)} needs at least {count * 4} bytes of BYTES data, got {end}",
            hint="each element is a 4-byte little-endian length followed by its bytes",
        )
    out = np.empty(count, dtype=object)
    for i in range(count):
        if pos + 4 > end:
            raise InputError(
                f"input {name!r}: BYTES data ends after {i} of {count} elements",
                hint="each element is a 4-byte little-endian length followed by its bytes",
            )
        (n,) = _LEN.unpack_from(view, pos)
        pos += 4
        if pos + n > end:
            raise InputError(f"input {name!r}: BYTES element {i} claims {n} bytes but only {end - pos} remain")
        out[i] = bytes(view[pos : pos + n])
        pos += n
    if pos != end:
        raise InputError(f"input {name!r}: {end - pos} bytes left over after {count} BYTES elements")
    return out.reshape(shape)


def decode_json_data(name: str, datatype: str, shape: Sequence[int], data: Any) -> np.ndarray:
    """JSON ``data`` (flat or nested, row-major) -> array of ``shape``."""
    count = element_count(name, shape)
    dt = np_dtype(name, datatype)
    if not isinstance(data, list):
        data = [data]
    try:
        if datatype == "BYTES":
            flat = _flatten_bytes(name, data)
            if len(flat) != count:  # checked before allocating the shape's count of elements
                raise _size_error(name, shape, count, len(flat))
            arr = np.empty(count, dtype=object)
            arr[:] = flat
            return arr.reshape(shape)
        if datatype == "BOOL":
            _check_bools(name, data)
            arr = np.asarray(data, dtype=dt)
        else:
            arr = numeric_array(name, datatype, dt, data)
    except InputError:
        raise
    except (ValueError, TypeError, OverflowError) as exc:
        first = first_line(exc, 200)
        raise InputError(f"input {name!r}: data is not a valid {datatype} array: {first}") from None
    if arr.size != count:
        raise _size_error(name, shape, count, arr.size)
    return arr.reshape(shape)


def _size_error(name: str, shape: Sequence[int], want: int, got: int) -> InputError:
    return InputError(f"input {name!r}: shape {list(shape)} needs {want} elements, data has {got}")


def _check_bools(name: str, data: list[Any]) -> None:
    stack: list[Any] = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif not isinstance(item, bool):
            raise InputError(f"input {name!r}: BOOL data holds {item!r}", hint="use true/false")


def _flatten_bytes(name: str, data: list[Any]) -> list[bytes]:
    out: list[bytes] = []
    stack: list[Any] = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            if isinstance(item, str):
                out.append(item.encode("utf-8"))
            elif isinstance(item, (bytes, bytearray)):
                out.append(bytes(item))
            else:
                raise InputError(f"input {name!r}: BYTES data holds {type(item).__name__}", hint="send strings")
        else:
            stack.pop()
    return out


def datatype_of(arr: np.ndarray) -> str:
    """The KServe datatype name of an array (object / str / bytes arrays are BYTES)."""
    if arr.dtype.kind in "OSU":
        return "BYTES"
    try:
        return _KSERVE_OF_NP[arr.dtype.newbyteorder("=")]
    except KeyError:
        raise InputError(f"arrays of dtype {arr.dtype} have no KServe datatype") from None


def _as_bytes(item: Any) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, np.bytes_):
        return bytes(item)
    return str(item).encode("utf-8")


def _utf8(name: str, index: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(
            f"output {name!r} element {index} is not UTF-8 text, and JSON strings carry only UTF-8",
            hint=f'ask for it in binary: "outputs": [{{"name": "{name}", "parameters": {{"binary_data": true}}}}] '
            '(or "parameters": {"binary_data_output": true}), or use gRPC',
        ) from None


def encode_raw(arr: np.ndarray) -> bytes:
    """Array -> raw little-endian bytes (BYTES: 4-byte length prefix per element)."""
    if arr.dtype.kind in "OSU":
        parts: list[bytes] = []
        for item in arr.ravel(order="C"):
            b = _as_bytes(item)
            parts.append(_LEN.pack(len(b)))
            parts.append(b)
        return b"".join(parts)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return np.ascontiguousarray(arr).tobytes()


def json_data(arr: np.ndarray, name: str = "") -> Any:
    """A flat, JSON-serialisable form of an array (strings for BYTES).

    JSON strings are Unicode, so a BYTES element that is not UTF-8 cannot be
    sent as JSON without changing it; rather than replace characters silently,
    the answer is a 400 that says how to get the bytes (binary extension, gRPC).
    """
    if arr.dtype.kind in "OSU":
        return [_utf8(name, i, _as_bytes(x)) for i, x in enumerate(arr.ravel())]
    if arr.dtype == np.float16:
        return arr.astype(np.float32).ravel()
    return np.ascontiguousarray(arr).ravel()
