"""Checks a request against the pinned signature before it reaches a runtime.

The per-model part (expected names, KServe datatypes, ranks, fixed dims and
shared symbols) is computed once at load into a ``RequestPlan``; a request then
costs a few dict lookups and int compares. Every failure is an ``InputError``
(400 / INVALID_ARGUMENT) naming the tensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fwx.errors import InputError
from fwx.serving.codecs import np_dtype
from fwx.serving.types import InferTensor, RequestedOutput
from fwx.signature import KSERVE_DTYPES, Signature, TensorSpec, is_dynamic


@dataclass(frozen=True)
class _InputRule:
    name: str
    datatype: str
    dtype: np.dtype
    rank: int
    fixed: tuple[tuple[int, int], ...]  # (axis, size)
    symbols: tuple[tuple[int, str], ...]  # (axis, symbol)
    shape_text: str


def _rule(spec: TensorSpec) -> _InputRule:
    datatype = KSERVE_DTYPES[spec.dtype]
    fixed = tuple((i, int(d)) for i, d in enumerate(spec.shape) if not is_dynamic(d))
    symbols = tuple((i, d) for i, d in enumerate(spec.shape) if isinstance(d, str))
    return _InputRule(
        spec.name, datatype, np_dtype(spec.name, datatype), spec.rank, fixed, symbols, str(spec.kserve_shape())
    )


class RequestPlan:
    """What a valid request to one model version looks like."""

    def __init__(self, signature: Signature, batchable: bool) -> None:
        self.rules = {s.name: _rule(s) for s in signature.inputs}
        self.input_names = signature.input_names
        self.output_names = signature.output_names
        self.batchable = batchable

    def check(self, tensors: Sequence[InferTensor]) -> tuple[dict[str, np.ndarray], int]:
        """Validated arrays by name, and the request's batch rows (1 when not batchable)."""
        arrays: dict[str, np.ndarray] = {}
        sizes: dict[str, int] = {}
        for t in tensors:
            rule = self.rules.get(t.name)
            if rule is None:
                raise InputError(f"unknown input {t.name!r}", hint=f"this model takes: {', '.join(self.input_names)}")
            if t.name in arrays:
                raise InputError(f"input {t.name!r} is given twice")
            arrays[t.name] = self._check_one(rule, t, sizes)
        if len(arrays) != len(self.rules):
            missing = [n for n in self.input_names if n not in arrays]
            raise InputError(
                f"missing input(s): {', '.join(missing)}", hint=f"this model takes: {', '.join(self.input_names)}"
            )
        return arrays, self._rows(arrays)

    @staticmethod
    def _check_one(rule: _InputRule, t: InferTensor, sizes: dict[str, int]) -> np.ndarray:
        if t.datatype != rule.datatype:
            raise InputError(f"input {t.name!r}: expected datatype {rule.datatype}, got {t.datatype}")
        data = t.data
        shape = data.shape
        if len(shape) != rule.rank:
            raise InputError(
                f"input {t.name!r}: expected rank {rule.rank} (shape {rule.shape_text}), got shape {list(shape)}"
            )
        for axis, size in rule.fixed:
            if shape[axis] != size:
                raise InputError(
                    f"input {t.name!r}: expected shape {rule.shape_text}, got {list(shape)}",
                    hint=f"dimension {axis} must be {size}",
                )
        for axis, sym in rule.symbols:
            seen = sizes.setdefault(sym, shape[axis])
            if seen != shape[axis]:
                raise InputError(
                    f"input {t.name!r}: dimension {axis} is {shape[axis]} but {sym!r} is {seen} in another input"
                )
        if data.dtype != rule.dtype:
            data = data.astype(rule.dtype)
        return data

    def _rows(self, arrays: dict[str, np.ndarray]) -> int:
        if not self.batchable:
            return 1
        firsts = {a.shape[0] for a in arrays.values()}
        if len(firsts) != 1:
            raise InputError(
                f"inputs disagree on the batch size: {sorted(firsts)}",
                hint="every input's first dimension is the batch",
            )
        rows = firsts.pop()
        if rows == 0:
            raise InputError("the request has an empty batch (first dimension 0)")
        return rows

    def check_outputs(self, requested: Sequence[RequestedOutput]) -> None:
        for out in requested:
            if out.name not in self.output_names:
                raise InputError(
                    f"unknown output {out.name!r}", hint=f"this model returns: {', '.join(self.output_names)}"
                )
