"""Tensor codecs: sizes checked with Python ints before any buffer is touched."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from fwx.errors import InputError
from fwx.serving.codecs import datatype_of, decode_json_data, decode_raw, element_count, encode_raw, json_data


def test_raw_roundtrip_is_zero_copy() -> None:
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    buf = encode_raw(arr)
    out = decode_raw("x", "FP32", [2, 3], buf)
    np.testing.assert_array_equal(out, arr)
    assert out.base is not None  # a view over the request bytes, not a copy


@pytest.mark.parametrize(
    ("shape", "nbytes", "fragment"),
    [
        ([2**62, 4], 16, "over the"),  # prod * itemsize overflows int64: still a clean error
        ([2**20, 4], 16, "needs 16777216 bytes, got 16"),
        ([2**31, 2**31], 16, "over the"),  # absurd element count
        ([-1, 4], 16, "negative"),
        ([2, 3], 20, "needs 24 bytes, got 20"),
        ([1.5, 2], 12, "non-integer"),
        ([True, 2], 8, "non-integer"),
        ([1] * 40, 4, "rank"),
    ],
)
def test_raw_rejects_bad_sizes(shape: list, nbytes: int, fragment: str) -> None:
    with pytest.raises(InputError, match=fragment) as info:
        decode_raw("img", "FP32", shape, b"\0" * nbytes)
    assert "'img'" in str(info.value)


def test_unknown_datatype_names_tensor() -> None:
    with pytest.raises(InputError, match="'x'.*FP128"):
        decode_raw("x", "FP128", [1], b"\0" * 16)


def test_bytes_raw_roundtrip_and_truncation() -> None:
    arr = np.array([b"ab", b"", "\u00e9".encode()], dtype=object)
    buf = encode_raw(arr)
    assert buf[:4] == struct.pack("<I", 2)
    out = decode_raw("s", "BYTES", [3], buf)
    assert list(out) == [b"ab", b"", "\u00e9".encode()]
    with pytest.raises(InputError, match="claims"):
        decode_raw("s", "BYTES", [1], struct.pack("<I", 2**31) + b"x")
    with pytest.raises(InputError, match="left over"):
        decode_raw("s", "BYTES", [1], buf)
    with pytest.raises(InputError, match="ends after"):
        decode_raw("s", "BYTES", [4], buf)


def test_json_flat_and_nested_agree() -> None:
    flat = decode_json_data("x", "FP32", [2, 2], [1, 2, 3, 4])
    nested = decode_json_data("x", "FP32", [2, 2], [[1, 2], [3, 4]])
    np.testing.assert_array_equal(flat, nested)
    assert flat.dtype == np.float32


@pytest.mark.parametrize(
    ("datatype", "data", "fragment"),
    [
        ("FP32", [1, 2, 3], "needs 4 elements"),
        ("FP32", ["a", "b", "c", "d"], "FP32 data holds a null, a string"),
        ("FP32", [[1, 2], [3]], "not a valid FP32"),  # ragged
        ("INT8", [1, 2, 3, 1000], "out of the INT8 range"),  # overflow
        ("BOOL", [1, 0, 1, 0], "BOOL data"),
        ("BYTES", [1, 2, 3, 4], "BYTES data holds int"),
    ],
)
def test_json_rejects_bad_data(datatype: str, data: list, fragment: str) -> None:
    with pytest.raises(InputError, match=fragment):
        decode_json_data("x", datatype, [2, 2], data)


def test_json_bytes_and_bool() -> None:
    s = decode_json_data("s", "BYTES", [2], ["a", "b"])
    assert list(s) == [b"a", b"b"]
    b = decode_json_data("b", "BOOL", [2], [True, False])
    assert b.dtype == np.bool_


def test_datatype_and_json_data() -> None:
    assert datatype_of(np.zeros(1, np.float16)) == "FP16"
    assert datatype_of(np.array([b"x"], dtype=object)) == "BYTES"
    assert datatype_of(np.zeros(1, np.dtype(">i4"))) == "INT32"
    assert json_data(np.array([b"x"], dtype=object)) == ["x"]
    assert element_count("x", [0, 5]) == 0
