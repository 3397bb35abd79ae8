"""The per-layer error of a located mismatch: an inline SVG for the HTML report, rows for the terminal.

The SVG is written by hand (no JavaScript, nothing downloaded, no
matplotlib): one point per compared node in the artifact's graph order, the
error as a multiple of what the tolerance allows on a log axis, the line at
1x where a node leaves tolerance, the located node ringed. Hovering a point
shows the node's name.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

from fwx.validators.mismatch import Mismatch, NodeError

_W, _H, _PAD = 720, 220, 40
_FLOOR = 1e-3  # ratios below this sit on the axis: "well within tolerance"


def _y(ratio: float, top: float) -> float:
    r = min(max(ratio, _FLOOR), top) if math.isfinite(ratio) else top
    span = math.log10(top) - math.log10(_FLOOR)
    return _H - _PAD - (math.log10(r) - math.log10(_FLOOR)) / span * (_H - 2 * _PAD)


def layer_svg(m: Mismatch) -> str:
    """``<svg>`` of every compared node's error over its tolerance (empty string when none was compared)."""
    layers = m.layers
    if not layers:
        return ""
    finite = [n.ratio for n in layers if math.isfinite(n.ratio)]
    top = max(10.0, *(r * 2 for r in finite)) if finite else 10.0
    step = (_W - 2 * _PAD) / max(len(layers) - 1, 1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" role="img" '
        f'aria-label="error per node over its tolerance">',
        f'<line x1="{_PAD}" y1="{_y(1.0, top):.1f}" x2="{_W - _PAD}" y2="{_y(1.0, top):.1f}" '
        'stroke="#c0262d" stroke-dasharray="4 3"/>',
        f'<text x="{_W - _PAD + 4}" y="{_y(1.0, top) + 4:.1f}" font-size="11" fill="#c0262d">1x</text>',
        f'<text x="4" y="{_PAD - 12}" font-size="11">error / tolerance (log)</text>',
        f'<text x="{_PAD}" y="{_H - 8}" font-size="11">nodes in graph order ({len(layers)} compared)</text>',
    ]
    points = [(_PAD + i * step, _y(n.ratio, top)) for i, n in enumerate(layers)]
    parts.append(
        '<polyline fill="none" stroke="#4063d8" stroke-width="1" points="'
        + " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        + '"/>'
    )
    for (x, y), n in zip(points, layers, strict=True):
        colour = "#18794e" if n.passed else "#c0262d"
        ring = ' stroke="#000" stroke-width="2"' if m.node is not None and n == m.node else ""
        tip = html.escape(f"{n.node} ({n.op}) {_times(n.ratio)}")
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{colour}"{ring}><title>{tip}</title></circle>')
    parts.append("</svg>")
    return "".join(parts)


def _times(ratio: float) -> str:
    return "inf x tolerance" if not math.isfinite(ratio) else f"{ratio:.3g}x tolerance"


def nearby(m: Mismatch, before: int = 2, after: int = 2) -> Sequence[NodeError]:
    """The located node with the compared nodes just before and after it (the terminal shows these)."""
    if m.node is None or m.node not in m.layers:
        return []
    k = m.layers.index(m.node)
    return m.layers[max(k - before, 0) : k + after + 1]
