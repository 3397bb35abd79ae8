"""A self-contained HTML validation report: tables plus, per output, an error histogram and a scatter.

Plots are matplotlib PNGs embedded as base64, drawn with the Agg canvas on a
bare ``Figure`` (no pyplot, so no global backend switch). matplotlib is
imported only here; without it the page has the tables and says so.
"""

from __future__ import annotations

import base64
import html
import io
from typing import TYPE_CHECKING, Any

import numpy as np

from fwx.validators.report_text import fmt

if TYPE_CHECKING:
    from fwx.validators.measurements import ArtifactResult, OutputResult, ReportData

_CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}th{background:#f4f4f4}td.l{text-align:left}
.pass{color:#18794e;font-weight:bold}.fail{color:#c0262d;font-weight:bold}img{max-width:100%}
.plots{display:flex;gap:1em;flex-wrap:wrap}code{background:#f4f4f4;padding:1px 4px}"""

_COLS = [
    ("max abs", "max_abs", "g"),
    ("mean abs", "mean_abs", "g"),
    ("max rel", "max_rel", "g"),
    ("cosine", "cosine", "cos"),
    ("SNR dB", "snr_db", "db"),
    ("top-1", "top1", "pct"),
    ("min atol", "min_atol", "g"),
    ("NaN", "nan", "i"),
    ("Inf", "inf", "i"),
]


def _verdict(ok: bool) -> str:
    return '<span class="pass">PASS</span>' if ok else '<span class="fail">FAIL</span>'


def _plot(points: dict[str, np.ndarray], title: str) -> str | None:
    """PNG (base64) with the |error| histogram and the reference-vs-candidate scatter."""
    fig = error_figure(points, title)
    if fig is None:
        return None
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def error_figure(points: dict[str, np.ndarray], title: str) -> Any:
    """The matplotlib Figure behind one output's plots (None without matplotlib)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    ref, cand = points["ref"], points["cand"]
    fig = Figure(figsize=(9, 3.2), dpi=80)
    FigureCanvasAgg(fig)
    ax1, ax2 = fig.subplots(1, 2)
    err = np.abs(cand - ref)
    top = float(err.max()) if err.size else 0.0
    if top > 0 and np.isfinite(top):  # bins from 0: an error is never negative
        ax1.hist(err, bins=50, range=(0.0, top), color="#4063d8")
        ax1.set_yscale("log")
    else:  # matplotlib would centre a zero-width histogram on 0, with a negative axis
        if top == 0:
            ax1.bar([0.0], [err.size], width=0.02, align="edge", color="#4063d8")
        ax1.text(
            0.5,
            0.5,
            f"all {err.size} errors are exactly 0" if top == 0 else "errors are not finite",
            transform=ax1.transAxes,
            ha="center",
            va="center",
        )
        ax1.set_xlim(0.0, 1.0)
    ax1.set_xlim(left=0.0)
    ax1.set_title("|candidate - reference|")
    ax1.set_xlabel("absolute error")
    ax1.set_ylabel("count")
    ax2.scatter(ref, cand, s=3, alpha=0.5, color="#389826")
    if ref.size:
        lo, hi = float(min(ref.min(), cand.min())), float(max(ref.max(), cand.max()))
        ax2.plot([lo, hi], [lo, hi], color="#999", linewidth=1)
    ax2.set_xlabel("reference")
    ax2.set_ylabel("candidate")
    ax2.set_title(title)
    fig.tight_layout()
    return fig


def _output_row(a: ArtifactResult, o: OutputResult) -> str:
    cells = "".join(
        f"<td>{html.escape(fmt(o.metrics.get(k), kind) if kind != 'i' else str(o.metrics.get(k, '-')))}</td>"
        for _, k, kind in _COLS
    )
    tol = html.escape(str(o.tolerance or "cosine/top-1"))
    reasons = html.escape("; ".join(o.reasons))
    return (
        f"<tr><td class=l>{html.escape(o.name)}</td>{cells}<td class=l>{tol}</td>"
        f"<td>{_verdict(o.passed and not a.errors)}</td><td class=l>{reasons}</td></tr>"
    )


def _artifact(a: ArtifactResult, plots: bool) -> list[str]:
    parts = [
        f"<h2>{html.escape(a.key)} {_verdict(a.passed)}</h2>",
        f"<p>format <code>{html.escape(a.format)}</code>, precision <code>{html.escape(a.precision)}</code>, "
        f"layout <code>{html.escape(str(a.layout))}</code>, provider <code>{html.escape(a.provider)}</code>, "
        f"{html.escape(a.runtime_version)}, mean {fmt(a.mean_ms, 'ms')} ms/sample</p>",
    ]
    parts += [f"<p class=fail>{html.escape(e)}</p>" for e in a.errors]
    parts += [f"<p>note: {html.escape(n)}</p>" for n in a.notes]
    head = "".join(f"<th>{h}</th>" for h, _, _ in _COLS)
    parts.append(f"<table><tr><th>output</th>{head}<th>tolerance</th><th>verdict</th><th>why</th></tr>")
    parts += [_output_row(a, o) for o in a.outputs]
    parts.append("</table>")
    parts += _located(a)
    for o in a.outputs:
        points: Any = o.metrics.get("points")
        png = _plot(points, f"{a.key}: {o.name}") if plots and points is not None else None
        if png:
            parts.append(
                f'<div class=plots><img alt="{html.escape(a.key)} {html.escape(o.name)}" '
                f'src="data:image/png;base64,{png}"></div>'
            )
    return parts


def render_html(report: ReportData, *, plots: bool = True) -> str:
    ref = report.reference
    body = [
        f"<h1>fwx validation {_verdict(report.passed)}</h1>",
        f"<p>reference <code>{html.escape(str(ref.get('key')))}</code> ({html.escape(str(ref.get('format')))}, "
        f"{html.escape(str(ref.get('provider')))}), device <code>{html.escape(report.device)}</code>, "
        f"{len(report.inputs)} samples, seed {report.seed}</p>",
    ]
    if ref.get("instead_of_source"):
        body.append(
            f"<p class=fail>the reference is NOT the source model (could not rebuild it: "
            f"{html.escape(str(ref['instead_of_source']))})</p>"
        )
    shapes = "; ".join(", ".join(f"{k}{v['shape']}" for k, v in s.items()) for s in report.inputs)
    body.append(f"<p>inputs: {html.escape(shapes)}</p>")
    body += [f"<p>note: {html.escape(n)}</p>" for n in report.notes]
    failures = report.failures()
    if failures:
        body.append("<h2>Failures</h2><ul>" + "".join(f"<li>{html.escape(f)}</li>" for f in failures) + "</ul>")
    for a in report.artifacts:
        body += _artifact(a, plots)
    return (
        "<!DOCTYPE html><html><head><meta charset=utf-8><title>fwx validation</title>"
        f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n"
    )


def _located(a: ArtifactResult) -> list[str]:
    """The located node, the per-layer error plot (inline SVG) and every compared node."""
    from fwx.validators.layer_plot import layer_svg

    m = a.mismatch
    if m is None:
        return []
    parts = [f"<h3>Where it leaves tolerance</h3><p>{html.escape(m.line())}</p>"]
    if not m.layers:
        return parts
    parts.append(
        f"<p>vs {html.escape(m.reference)}, tensors paired by {html.escape(m.matched_by)}</p>"
        f"<div class=plots>{layer_svg(m)}</div>"
    )
    rows = "".join(
        f"<tr><td class=l>{html.escape(n.node)}</td><td class=l>{html.escape(n.op)}</td>"
        f"<td class=l>{html.escape(n.origin or '-')}</td><td>{fmt(n.max_abs)}</td><td>{fmt(n.cosine, 'cos')}</td>"
        f"<td>{n.ratio:.3g}x</td><td>{_verdict(n.passed)}</td></tr>"
        for n in m.layers
    )
    parts.append(
        "<details><summary>every compared node</summary><table><tr><th>node</th><th>op</th><th>from</th>"
        f"<th>max abs</th><th>cosine</th><th>of tolerance</th><th>verdict</th></tr>{rows}</table></details>"
    )
    return parts
