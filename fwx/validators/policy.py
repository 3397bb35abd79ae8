"""Tolerances by precision: the policy that turns measured metrics into a verdict.

Tolerance is data (``Tolerance(atol, rtol)``): defaults per precision, a global
``--atol``/``--rtol`` override, and per-output overrides. An element passes
when ``|cand - ref| <= atol + rtol * |ref|`` (numpy ``allclose``). A default
atol is per unit of the output's magnitude (its largest ``|ref|``) when that
exceeds 1: float rounding grows with the size of the values a layer sums, so
a logit near 0 in an output that reaches 37 carries the rounding of 37-sized
terms (torchvision's EfficientNet-B0: 2e-4 between correct runtimes, 6e-6 of
the output's range). An output computed in float16 or bfloat16 (a half-precision
source) is held to that precision's tolerance. A tolerance the user gives is absolute. INT8 is not
judged element-wise by default (quantisation error is not small everywhere):
it needs cosine similarity >= 0.99 and top-1 agreement >= 99% on class-score
outputs, or, when labels are given, an accuracy drop of at most one point.
An explicit tolerance for an int8 artifact adds the element-wise check.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fwx.errors import UsageError


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    scaled: bool = False  # atol is per unit of the output's largest |reference| when that exceeds 1

    def __post_init__(self) -> None:
        if not (self.atol >= 0 and self.rtol >= 0 and math.isfinite(self.atol) and math.isfinite(self.rtol)):
            raise UsageError(f"tolerances must be finite and >= 0, got atol={self.atol} rtol={self.rtol}")

    def __str__(self) -> str:
        return f"atol {self.atol:g} rtol {self.rtol:g}"

    def at(self, scale: float) -> Tolerance:
        """The absolute tolerance for an output whose largest ``|reference|`` is ``scale``."""
        if not self.scaled or not math.isfinite(scale) or scale <= 1.0:
            return Tolerance(self.atol, self.rtol)
        return Tolerance(self.atol * scale, self.rtol)


DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "fp32": Tolerance(1e-4, 1e-3, scaled=True),
    "fp16": Tolerance(1e-2, 1e-2, scaled=True),
    "bf16": Tolerance(5e-2, 5e-2, scaled=True),
}


def precision_class(precision: str | None) -> str:
    """Normalise the many spellings (``float16``, ``int8-dynamic``, ``uint8``) to fp32/fp16/bf16/int8."""
    p = (precision or "fp32").lower()
    if "int" in p or p.startswith("q"):
        return "int8"
    if p in ("fp16", "float16", "half", "f16"):
        return "fp16"
    if p in ("bf16", "bfloat16"):
        return "bf16"
    return "fp32"


_HALF = {"float16": "fp16", "bfloat16": "bf16"}


def computed_in(precision: str | None, dtypes: set[str]) -> str | None:
    """The precision an output is judged at: a float16 (bfloat16) output is held to that precision's
    tolerance even from an fp32 artifact, since a half-precision model (a ``model.half()`` ONNX source)
    differs by half-precision rounding between correct runtimes; quantised artifacts keep their own."""
    half = sorted(_HALF[d] for d in dtypes if d in _HALF)
    if half and precision_class(precision) == "fp32":
        return "bf16" if "bf16" in half else half[0]
    return precision


@dataclass
class Policy:
    """What passes. Build it from CLI flags with ``Policy(atol=..., rtol=..., per_output=...)``."""

    tolerances: dict[str, Tolerance] = field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    atol: float | None = None
    rtol: float | None = None
    per_output: dict[str, Tolerance] = field(default_factory=dict)
    int8_min_cosine: float = 0.99
    int8_min_top1: float = 0.99
    max_accuracy_drop: float = 0.01
    #: The accuracy budget that already judged this int8 artifact on its own eval data (``fwx export
    #: --max-drop/--min-cosine/--min-agreement``): its verdict is the one verdict, not a second gate on
    #: the few validation samples, where one flipped prediction of 16 reads as 94% agreement.
    int8_budget: str | None = None

    def __post_init__(self) -> None:
        Tolerance(self.atol or 0.0, self.rtol or 0.0)  # refuses negative or non-finite overrides

    def tolerance(self, precision: str | None, output: str) -> Tolerance | None:
        """The element-wise tolerance for this output, or None when none applies (int8 default)."""
        if output in self.per_output:
            return self.per_output[output]
        base = self.tolerances.get(precision_class(precision))
        if base is None and self.atol is None and self.rtol is None:
            return None
        base = base or Tolerance(0.0, 0.0)
        return Tolerance(
            base.atol if self.atol is None else self.atol,
            base.rtol if self.rtol is None else self.rtol,
            scaled=base.scaled and self.atol is None,  # --atol is absolute
        )

    def applied(self, precision: str | None, output: str, m: Mapping[str, Any]) -> Tolerance | None:
        """The tolerance this output is judged by: ``tolerance`` at the output's measured ``scale``."""
        tol = self.tolerance(precision, output)
        return tol.at(float(m.get("scale", 0.0))) if tol is not None else None

    def rtol_for(self, precision: str | None, output: str) -> float:
        tol = self.tolerance(precision, output)
        return tol.rtol if tol is not None else 0.0

    def judge(self, m: Mapping[str, Any], precision: str | None, output: str) -> list[str]:
        """Every reason this output fails (empty list: it passes)."""
        reasons: list[str] = []
        if m.get("new_nonfinite"):
            reasons.append(f"{m['new_nonfinite']} NaN/Inf value(s) where the reference is finite")
        tol = self.applied(precision, output, m)
        if tol is not None and m["min_atol"] > tol.atol:
            reasons.append(f"max abs err {m['max_abs']:.3g} exceeds {tol} (needs atol >= {m['min_atol']:.3g})")
        if precision_class(precision) == "int8" and output not in self.per_output:
            reasons.extend(self._judge_int8(m))
        return reasons

    def _judge_int8(self, m: Mapping[str, Any]) -> list[str]:
        if self.int8_budget is not None:
            return []
        reasons = []
        if m["cosine"] < self.int8_min_cosine:
            reasons.append(f"cosine {m['cosine']:.4f} < {self.int8_min_cosine}")
        if "accuracy" in m:
            drop = m["accuracy_ref"] - m["accuracy"]
            if drop > self.max_accuracy_drop:
                reasons.append(
                    f"accuracy {m['accuracy']:.2%} is {drop:.2%} below the reference's "
                    f"{m['accuracy_ref']:.2%} (max drop {self.max_accuracy_drop:.0%})"
                )
        elif m.get("top1") is not None and m["top1"] < self.int8_min_top1:
            rows = int(m.get("top1_rows") or 0)
            flip = f" on {rows} rows (one flip = {100 / rows:.1f} pt)" if rows else ""
            reasons.append(f"top-1 agreement {m['top1']:.1%} < {self.int8_min_top1:.0%}{flip}")
        return reasons


def parse_tolerance_override(text: str, default_rtol: float | None = None) -> tuple[str, Tolerance]:
    """``OUTPUT=ATOL[,RTOL]`` from ``--tolerance``."""
    name, sep, rest = text.partition("=")
    parts = rest.split(",")
    try:
        if not sep or not name.strip() or len(parts) > 2:
            raise ValueError
        atol = float(parts[0])
        rtol = (
            float(parts[1])
            if len(parts) == 2
            else (default_rtol if default_rtol is not None else DEFAULT_TOLERANCES["fp32"].rtol)
        )
    except ValueError:
        raise UsageError(
            f"cannot parse --tolerance {text!r}", hint="write OUTPUT=ATOL[,RTOL], e.g. logits=1e-3,1e-2"
        ) from None
    return name.strip(), Tolerance(atol, rtol)
