"""What a validation measured: per (artifact, output) results, the data the report renderings read.

The data sits below ``render``/``html`` (which read it) and ``report`` (which
adds the renderings to it), so the views never import the report module back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

from fwx.validators.mismatch import Mismatch
from fwx.validators.policy import Tolerance


def json_safe(value: Any) -> Any:
    """JSON-safe copy: non-finite floats become strings, numpy scalars plain numbers."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items() if k != "points"}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and not hasattr(value, "__len__"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


@dataclass
class OutputResult:
    name: str
    metrics: dict[str, Any]
    tolerance: Tolerance | None
    reasons: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.reasons

    def to_json(self) -> dict[str, Any]:
        tol = {"atol": self.tolerance.atol, "rtol": self.tolerance.rtol} if self.tolerance else None
        return json_safe(
            {"name": self.name, "passed": self.passed, "tolerance": tol, "reasons": self.reasons, **self.metrics}
        )


@dataclass
class ArtifactResult:
    key: str
    format: str
    precision: str = "fp32"
    layout: str | None = None
    provider: str = ""
    runtime_version: str = ""
    outputs: list[OutputResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # artifact-level failures (load, crash, names)
    notes: list[str] = field(default_factory=list)
    mean_ms: float | None = None
    mismatch: Mismatch | None = None  # where a failed artifact first leaves tolerance (``fwx.validators.locate``)
    judged_by: str | None = None  # an int8 artifact judged by its accuracy budget (``Policy.int8_budget``)

    @property
    def passed(self) -> bool:
        return not self.errors and all(o.passed for o in self.outputs)

    def failures(self) -> list[str]:
        lines = [f"{self.key}: {e}" for e in self.errors]
        for o in self.outputs:
            lines += [f"{self.key}: output {o.name!r}: {r}" for r in o.reasons]
        if self.mismatch is not None and self.mismatch.node is not None:
            lines.append(f"{self.key}: {self.mismatch.line()}")
        return lines

    def to_json(self) -> dict[str, Any]:
        return json_safe(
            {
                "key": self.key,
                "format": self.format,
                "precision": self.precision,
                "layout": self.layout,
                "provider": self.provider,
                "runtime_version": self.runtime_version,
                "passed": self.passed,
                "mean_ms": self.mean_ms,
                "errors": self.errors,
                "notes": self.notes,
                "outputs": [o.to_json() for o in self.outputs],
                "mismatch": self.mismatch.to_json() if self.mismatch is not None else None,
                "judged_by": self.judged_by,
            }
        )


class ReportData(Protocol):
    """What the terminal table and the HTML page read from a ``ValidationReport``."""

    reference: dict[str, Any]
    artifacts: list[ArtifactResult]
    inputs: list[dict[str, Any]]
    seed: int
    device: str
    notes: list[str]

    @property
    def passed(self) -> bool: ...

    def failures(self) -> list[str]: ...
