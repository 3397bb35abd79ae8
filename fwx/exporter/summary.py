"""What an export reports per target: one row each, whether it was published or not.

The same rows go to the summary table, to ``--json`` (``targets``) and, when a
named target fails, onto the error (``FwxError.detail``), so a script sees
which targets passed, which failed and why either way. The check column says
what the verdict was based on: the element-wise tolerance (``max abs``) for
float artifacts, the INT8 gate (cosine similarity, top-1 agreement) for
quantised ones judged without an element-wise tolerance.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fwx.formats import Format
from fwx.validators.policy import precision_class


@dataclass
class TargetRow:
    """One line of the summary: what happened to one requested format."""

    format: Format
    status: str  # ok | failed | skipped (failed: no artifact, or validated wrong; skipped: --to all left it out)
    path: str | None = None  # relative to the version folder; None when not published
    size_bytes: int = 0
    plan: str = ""
    check: str = ""
    signature: str = ""
    error: str | None = None
    published: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format.value,
            "status": self.status,
            "published": self.published,
            "path": self.path,
            "size_bytes": self.size_bytes,
            "plan": self.plan,
            "check": self.check,
            "signature": self.signature,
            "error": self.error,
        }


def check_text(validation: Mapping[str, Any] | None) -> str:
    """``PASS (max abs 1.2e-05)``, ``PASS (cosine 0.9998, top-1 100.0%)``, ``FAIL (...)`` or ``not validated``."""
    if not validation or validation.get("skipped"):
        return "not validated"
    verdict = "PASS" if validation.get("passed") else "FAIL"
    basis = judged_on(validation)
    return f"{verdict} ({basis})" if basis else verdict


def judged_on(validation: Mapping[str, Any]) -> str:
    """The measurements the verdict rests on, worst output first.

    An output with no element-wise tolerance (``atol`` None) of an int8
    artifact was judged by the INT8 gate: its cosine similarity and, for class
    scores, top-1 agreement. Every other output was judged by its tolerance.
    """
    if validation.get("judged_by"):
        return str(validation["judged_by"])
    outputs = [o for o in (validation.get("outputs") or {}).values() if isinstance(o, Mapping)]
    int8 = precision_class(validation.get("precision")) == "int8"
    gated = [o for o in outputs if int8 and o.get("atol") is None]
    toleranced = [o for o in outputs if not (int8 and o.get("atol") is None)]
    parts = []
    cosine = _lowest(gated, "cosine")
    if cosine is not None:
        parts.append(f"cosine {cosine:.6f}")
    top1 = _lowest(gated, "top1")
    if top1 is not None:
        parts.append(f"top-1 {top1:.1%}")
    worst = _highest(toleranced, "max_abs")
    if worst is not None:
        parts.append(f"max abs {worst:.1e}")
    return ", ".join(parts)


def worst_diff(validation: Mapping[str, Any]) -> float | None:
    """The largest ``max_abs`` over the outputs (None when none was measured)."""
    outputs = [o for o in (validation.get("outputs") or {}).values() if isinstance(o, Mapping)]
    return _highest(outputs, "max_abs")


def _numbers(outputs: list[Mapping[str, Any]], key: str) -> list[float]:
    return [float(o[key]) for o in outputs if isinstance(o.get(key), (int, float))]


def _lowest(outputs: list[Mapping[str, Any]], key: str) -> float | None:
    values = _numbers(outputs, key)
    return min(values) if values else None


def _highest(outputs: list[Mapping[str, Any]], key: str) -> float | None:
    values = _numbers(outputs, key)
    return max(values) if values else None
