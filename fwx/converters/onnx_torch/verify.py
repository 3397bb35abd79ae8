"""Run the written artifact and onnxruntime on the same inputs at several sizes; measure every output.

A size onnxruntime itself cannot run (an ONNX graph that bakes a length, for
example) is skipped and recorded, not counted against the translation. Any
other difference fails the hop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fwx.errors import first_line
from fwx.signature import Signature
from fwx.validators.policy import DEFAULT_TOLERANCES, Tolerance

Runner = Callable[[list[np.ndarray]], list[np.ndarray]]


@dataclass
class Check:
    sizes: dict[str, int]
    max_abs_err: float = 0.0
    ok: bool = True
    skipped: str | None = None
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"sizes": self.sizes, "max_abs_err": self.max_abs_err, "ok": self.ok}
        if self.skipped:
            out["skipped"] = self.skipped
        if self.problems:
            out["problems"] = self.problems
        return out


def size_sets(sizes: Mapping[str, int], static: bool) -> list[dict[str, int]]:
    """The sample's sizes, then each dynamic dim alone at 1 and at a larger size."""
    sets = [dict(sizes)]
    if static:
        return sets
    for sym, v in sizes.items():
        for alt in (1, v + 3):
            if alt != v:
                sets.append({**sizes, sym: alt})
    return sets


def _tolerance(dtype: np.dtype) -> Tolerance | None:
    """fwx's validation policy for the output's precision; None means exact (ints, bools)."""
    if dtype.kind != "f":
        return None
    return DEFAULT_TOLERANCES["fp32" if dtype.itemsize >= 4 else "fp16"]


def compare(names: Sequence[str], got: Sequence[np.ndarray], ref: Sequence[np.ndarray], check: Check) -> None:
    """Fill ``check`` with the worst error and every problem, output by output."""
    if len(got) != len(ref):
        check.problems.append(f"{len(got)} outputs, onnxruntime gives {len(ref)}")
    for name, a, r in zip(names, got, ref, strict=False):
        if a.shape != r.shape:
            check.problems.append(f"{name}: shape {list(a.shape)}, onnxruntime {list(r.shape)}")
            continue
        if a.dtype != r.dtype:
            check.problems.append(f"{name}: dtype {a.dtype}, onnxruntime {r.dtype}")
            continue
        tol = _tolerance(r.dtype)
        if tol is None:
            bad = int(np.count_nonzero(a != r))
            if bad:
                check.problems.append(f"{name}: {bad} of {r.size} values differ")
            continue
        a64, r64 = a.astype(np.float64), r.astype(np.float64)
        diff = np.abs(a64 - r64)
        err = float(np.max(np.where(np.isnan(diff), 0.0, diff), initial=0.0))
        check.max_abs_err = max(check.max_abs_err, err)
        tol = tol.at(float(np.max(np.abs(r64[np.isfinite(r64)]), initial=0.0)))  # the validators' rule
        if not np.allclose(a64, r64, atol=tol.atol, rtol=tol.rtol, equal_nan=True):
            check.problems.append(f"{name}: max abs err {err:.3g} over {tol}")
    check.ok = not check.problems


@dataclass
class Reference:
    """onnxruntime's outputs for one size set (``ref`` is None when onnxruntime rejects the sizes)."""

    sizes: dict[str, int]
    feeds: dict[str, np.ndarray]
    ref: list[np.ndarray] | None
    error: str | None = None


def references(
    session: Any, sets: Sequence[dict[str, int]], make: Callable[[dict[str, int]], dict[str, np.ndarray]]
) -> list[Reference]:
    out: list[Reference] = []
    for sizes in sets:
        feeds = make(sizes)
        try:
            out.append(Reference(sizes, feeds, list(session.run(None, feeds))))
        except Exception as e:  # noqa: BLE001 - recorded as a skipped size set
            out.append(Reference(sizes, feeds, None, first_line(e, 200)))
    return out


def fixed_symbols(refs: Sequence[Reference]) -> list[str]:
    """Dynamic dims onnxruntime rejects at every size but the sample's: the ONNX graph fixes them."""
    base = refs[0].sizes
    tried = {s for r in refs[1:] for s, v in r.sizes.items() if v != base[s]}
    ok = {s for r in refs[1:] if r.ref is not None for s, v in r.sizes.items() if v != base[s]}
    return [s for s in base if s in tried and s not in ok]


def verify(run: Runner, sig: Signature, refs: Sequence[Reference]) -> list[Check]:
    """Run ``run`` at every size set onnxruntime accepted; never raises, records everything."""
    checks: list[Check] = []
    for r in refs:
        check = Check(r.sizes)
        checks.append(check)
        if r.ref is None:
            check.skipped = f"onnxruntime cannot run these sizes: {r.error}"
            continue
        try:
            got = run([r.feeds[s.name] for s in sig.inputs])
        except Exception as e:  # noqa: BLE001 - recorded as a failed check
            check.ok = False
            check.problems.append(f"{type(e).__name__}: {first_line(e)}")
            continue
        compare(sig.output_names, got, r.ref, check)
    return checks
