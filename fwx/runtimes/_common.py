"""Helpers every runtime shares: input checking, dtype coercion, output naming.

Kept free of framework imports so each runtime module pays only for its own
framework. The checks are cheap (a dict lookup and a dtype compare per input)
because the server calls ``infer`` once per batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fwx.errors import InputError, UsageError
from fwx.signature import Dim, Signature, TensorSpec

DEVICES = ("cpu", "cuda")


def check_device(device: str) -> str:
    """Accept ``cpu``/``cuda`` (``cuda:N`` too); anything else is a usage error."""
    base = device.split(":", 1)[0]
    if base not in DEVICES:
        raise UsageError(f"unknown device {device!r}", hint="use cpu or cuda")
    return device


def np_dtypes(specs: Sequence[TensorSpec]) -> dict[str, np.dtype]:
    """NumPy dtype per tensor name (``bytes`` tensors map to object arrays)."""
    return {s.name: np.dtype(object) if s.dtype == "bytes" else np.dtype(s.dtype) for s in specs}


def gather(inputs: Mapping[str, np.ndarray], expected: Mapping[str, np.dtype]) -> dict[str, np.ndarray]:
    """Return the expected inputs in order, cast when the caller's dtype differs.

    A missing or unexpected name is an ``InputError`` (one line, lists what the
    model takes) rather than a framework error deep inside the runtime.
    """
    missing = [n for n in expected if n not in inputs]
    extra = [n for n in inputs if n not in expected]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing input(s) {', '.join(missing)}")
        if extra:
            parts.append(f"unknown input(s) {', '.join(extra)}")
        raise InputError("; ".join(parts), hint=f"the model takes: {', '.join(expected)}")
    out: dict[str, np.ndarray] = {}
    for name, dtype in expected.items():
        arr = inputs[name]
        if not isinstance(arr, np.ndarray) or arr.dtype != dtype:
            arr = np.asarray(arr, dtype=dtype)
        out[name] = arr
    return out


def dynamic_dim(value: Any) -> Dim:
    """Map a framework's dimension (int, None, -1, symbol text) to a ``Dim``."""
    if value is None:
        return -1
    if isinstance(value, str):
        return value if value.isidentifier() else -1
    v = int(value)
    return -1 if v < 0 else v


def output_names(hint: Signature | None, count: int, given: Sequence[str] | None = None) -> list[str]:
    """Names for ``count`` outputs: the pinned ones, else the model's own, else ``output_i``."""
    if hint is not None and len(hint.outputs) == count:
        return hint.output_names
    if given is not None and len(given) == count:
        return list(given)
    return [f"output_{i}" for i in range(count)]


def hint_names(hint: Signature | None, count: int, fallback: Sequence[str]) -> list[str]:
    """Input names: the pinned ones when their count matches, else the artifact's own."""
    if hint is not None and len(hint.inputs) == count:
        return hint.input_names
    return list(fallback)
