"""JSON numbers -> a numeric array of one dtype, refusing every silent coercion.

``np.asarray(data, dtype=float32)`` turns ``null`` into NaN, ``"4"`` into 4.0,
``1e300`` into inf and, for integer dtypes, 1.5 into 1 and 300 into 44 (uint8).
A client that sent any of those has a bug it should hear about, so the values
are first read with the type numpy infers (one C pass, no Python loop), that
kind is checked against the datatype, and the cast is checked for overflow.
Used by the KServe v2 and TF Serving JSON decoders.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fwx.errors import InputError


def numeric_array(name: str, label: str, dtype: np.dtype, data: Any) -> np.ndarray:
    """``data`` (nested lists of JSON numbers) as an array of ``dtype``; 400 naming ``name`` otherwise.

    ``label`` is the datatype as the client spelled it (``FP32``, ``float32``).
    Integral floats (``2.0``) are accepted for integer dtypes; booleans are not
    numbers. Raises ``ValueError``/``TypeError`` only for ragged or too-deep
    nesting, which the callers already turn into a 400.
    """
    raw = np.asarray(data)
    kind = raw.dtype.kind
    if kind in "OUS":
        raise InputError(
            f"input {name!r}: {label} data holds a null, a string or a value out of every numeric range",
            hint=f"send JSON numbers only for {label}",
        )
    if kind == "b":
        raise InputError(f"input {name!r}: {label} data holds true/false", hint=f"send JSON numbers for {label}")
    if dtype.kind in "iu":
        return _as_int(name, label, dtype, raw, data)
    with np.errstate(over="ignore"):  # overflow is detected below and reported as a 400
        out = raw.astype(dtype)
    if dtype.kind == "f" and out.size and not np.isfinite(out).all():
        raise InputError(
            f"input {name!r}: a value is out of the {label} range (it would become inf)",
            hint=f"send values within +-{float(np.finfo(dtype).max):.4g}",
        )
    return out


def _as_int(name: str, label: str, dtype: np.dtype, raw: np.ndarray, data: Any) -> np.ndarray:
    whole = raw.dtype.kind != "f" or not raw.size or (np.isfinite(raw).all() and (raw == np.floor(raw)).all())
    if not whole:
        raise InputError(
            f"input {name!r}: {label} data holds a non-integer value", hint="send whole numbers (e.g. 2, not 1.5)"
        )
    if not raw.size:
        return raw.astype(dtype)
    info = np.iinfo(dtype)
    out_of_range = InputError(f"input {name!r}: a value is out of the {label} range [{info.min}, {info.max}]")
    lo, hi = raw.min(), raw.max()
    if raw.dtype.kind != "f":
        if lo < info.min or hi > info.max:
            raise out_of_range
        return raw.astype(dtype)
    if lo < info.min or hi > info.max:
        raise out_of_range
    # float64 rounds 2**63 - 1 and 2**63 alike (numpy reads a mix of small ints and one over 2**63 as float64),
    # so the client's own numbers are read again exactly; a float cast that wrapped no longer equals the read.
    try:
        with np.errstate(invalid="ignore", over="ignore"):
            out = np.asarray(data, dtype=dtype)
    except OverflowError:
        raise out_of_range from None
    if not np.array_equal(out.astype(np.float64), raw):
        raise out_of_range
    return out
