"""The validation report: per (artifact, output) results, a verdict, and renderings.

JSON (``to_json``), the slice stored in fwx.json (``for_artifact``), a
terminal table (``table``) and a self-contained HTML page (``write``, via
``fwx.validators.report_html``). Building a report never raises on bad numbers:
non-finite floats are written as the strings ``"inf"``/``"nan"`` in JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fwx.errors import UsageError
from fwx.validators.measurements import ArtifactResult, OutputResult, json_safe

__all__ = ["ArtifactResult", "OutputResult", "ValidationReport"]


@dataclass
class ValidationReport:
    reference: dict[str, Any]
    artifacts: list[ArtifactResult]
    inputs: list[dict[str, Any]] = field(default_factory=list)  # per sample: name -> {shape, dtype}
    seed: int = 0
    device: str = "cpu"
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # reference-level failures

    @property
    def passed(self) -> bool:
        return not self.errors and all(a.passed for a in self.artifacts)

    def failures(self) -> list[str]:
        """Every failure, one line each: reference problems first, then per artifact and output."""
        lines = [f"reference: {e}" for e in self.errors]
        for a in self.artifacts:
            lines += a.failures()
        return lines

    def artifact(self, key: str) -> ArtifactResult:
        for a in self.artifacts:
            if a.key == key:
                return a
        raise KeyError(key)

    def to_json(self) -> dict[str, Any]:
        return json_safe(
            {
                "passed": self.passed,
                "reference": self.reference,
                "device": self.device,
                "seed": self.seed,
                "inputs": self.inputs,
                "notes": self.notes,
                "errors": self.errors,
                "failures": self.failures(),
                "artifacts": [a.to_json() for a in self.artifacts],
            }
        )

    def for_artifact(self, key: str) -> dict[str, Any]:
        """The compact dict stored in ``ArtifactEntry.validation`` of fwx.json."""
        a = self.artifact(key)
        return json_safe(
            {
                "passed": a.passed and not self.errors,
                "reference": self.reference.get("key", ""),
                "device": self.device,
                "provider": a.provider,
                "precision": a.precision,
                "samples": len(self.inputs),
                "seed": self.seed,
                "failures": [f"reference: {e}" for e in self.errors] + a.failures(),
                **({"judged_by": a.judged_by} if a.judged_by else {}),
                **({"notes": list(a.notes)} if a.notes else {}),  # a check run the way the model is used
                "outputs": {
                    o.name: {
                        k: o.metrics.get(k)
                        for k in ("max_abs", "mean_abs", "max_rel", "cosine", "snr_db", "top1", "min_atol")
                    }
                    | {
                        "passed": o.passed,
                        "atol": o.tolerance.atol if o.tolerance else None,
                        "rtol": o.tolerance.rtol if o.tolerance else None,
                    }
                    for o in a.outputs
                },
            }
            | ({"mismatch": a.mismatch.to_json()} if a.mismatch is not None else {})
        )

    def table(self) -> str:
        from fwx.validators.report_text import render_table

        return render_table(self)

    def write(self, path: str | Path) -> Path:
        """Write ``.json`` or ``.html`` (chosen by suffix)."""
        p = Path(path)
        if p.suffix.lower() == ".json":
            p.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
        elif p.suffix.lower() in (".html", ".htm"):
            from fwx.validators.report_html import render_html

            p.write_text(render_html(self), encoding="utf-8")
        else:
            raise UsageError(f"--report {p}: unknown report type", hint="use a .json or .html file name")
        return p
