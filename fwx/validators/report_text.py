"""Terminal rendering of a ``ValidationReport``: one row per (artifact, output), coloured verdicts."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from fwx import ui

if TYPE_CHECKING:
    from fwx.validators.measurements import ArtifactResult, ReportData


def fmt(value: Any, kind: str = "g") -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else ("nan" if math.isnan(value) else "-inf")
    if kind == "pct":
        return f"{value:.1%}"
    if kind == "cos":
        return f"{value:.6f}"
    if kind == "db":
        return f"{value:.1f}"
    if kind == "ms":  # a duration: plain decimals, never 2.57e+02
        v = float(value)
        return f"{v:.0f}" if abs(v) >= 100 else (f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}")
    return f"{value:.2e}" if isinstance(value, float) else str(value)


def render_table(report: ReportData) -> str:
    ref = report.reference
    head = (
        f"reference: {ref.get('key')} ({ref.get('format')}, {ref.get('provider')})  "
        f"device: {report.device}  samples: {len(report.inputs)}  seed: {report.seed}"
    )
    if ref.get("instead_of_source"):
        head = (
            f"reference: {ref.get('key')}, NOT the source model (could not rebuild it: {ref['instead_of_source']})\n"
            + head
        )
    headers = [
        "artifact",
        "prec",
        "provider",
        "output",
        "max abs",
        "mean abs",
        "max rel",
        "cosine",
        "SNR dB",
        "top-1",
        "min atol",
        "tolerance",
        "verdict",
    ]
    rows: list[list[str]] = []
    for a in report.artifacts:
        if not a.outputs:
            rows.append([a.key, a.precision, a.provider or "-", "-", *["-"] * 8, ui.verdict(a.passed)])
        for o in a.outputs:
            m = o.metrics
            rows.append(
                [
                    a.key,
                    a.precision,
                    a.provider,
                    o.name,
                    fmt(m.get("max_abs")),
                    fmt(m.get("mean_abs")),
                    fmt(m.get("max_rel")),
                    fmt(m.get("cosine"), "cos"),
                    fmt(m.get("snr_db"), "db"),
                    fmt(m.get("top1"), "pct"),
                    fmt(m.get("min_atol")),
                    str(o.tolerance or "cos/top-1"),
                    ui.verdict(o.passed and not a.errors),
                ]
            )
    lines = [head, ui.table(headers, rows)]
    for a in report.artifacts:
        lines += _located(a)
    lines += [f"note: {n}" for n in report.notes]
    for a in report.artifacts:
        lines += [f"note: {a.key}: {n}" for n in a.notes]
    failures = report.failures()
    if failures:
        lines.append(f"{len(failures)} failure(s):")
        lines += [f"  - {f}" for f in failures]
    lines.append(f"verdict: {ui.verdict(report.passed)}")
    return "\n".join(lines)


def _located(a: ArtifactResult) -> list[str]:
    """The located node of a failed artifact with its neighbours in graph order (``fwx.validators.locate``)."""
    from fwx.validators.layer_plot import nearby

    m = a.mismatch
    if m is None:
        return []
    if m.node is None:
        return [f"{a.key}: {m.line()}"]
    rows = [
        [n.node, n.op, n.origin or "-", fmt(n.max_abs), fmt(n.cosine, "cos"), f"{n.ratio:.3g}x", ui.verdict(n.passed)]
        for n in nearby(m)
    ]
    head = f"{a.key}: where it leaves tolerance (vs {m.reference}, tensors paired by {m.matched_by}):"
    return [head, ui.table(["node", "op", "from", "max abs", "cosine", "of tolerance", "verdict"], rows)]
