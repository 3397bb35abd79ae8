"""How a quantisation receipt reads on a terminal, and when it deserves a warning.

Used by ``fwx export`` after quantising and by the validation report, from the
``quantization`` entry of fwx.json (``QuantInfo.to_json()``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fwx.quantize.info import QuantInfo

#: Above this many points of top-1 lost (or below this agreement), the receipt carries a warning.
DROP_WARN_POINTS = 1.0
AGREEMENT_WARN = 0.99


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.2f}%"


def _size(n: int) -> str:
    from fwx.ui import human_size

    return human_size(n)


def accuracy_warning(info: QuantInfo) -> str | None:
    ev = info.eval
    if ev is None:
        return None
    drop = ev.drop_points
    if drop is not None and drop > DROP_WARN_POINTS:
        return f"{info.kind} lost {drop:.2f} points of top-1 accuracy on the eval data ({ev.samples} samples)"
    if ev.agreement is not None and ev.agreement < AGREEMENT_WARN:
        return f"{info.kind} agrees with the float model on only {ev.agreement * 100:.1f}% of eval samples"
    return None


def rows(data: Mapping[str, Any] | QuantInfo) -> list[tuple[str, str]]:
    """(field, value) pairs for one quantised artifact, in reading order."""
    info = data if isinstance(data, QuantInfo) else QuantInfo.from_json(dict(data))
    out = [("quantization", f"{info.kind} ({info.format}, {info.tool} {info.tool_version})".replace(" )", ")"))]
    if info.method:
        out.append(("calibration", f"{info.method}, {info.samples} samples from {info.calibration_data}"))
    if info.granularity:
        out.append(("weights", info.granularity + (f", {info.weight_bits}-bit" if info.weight_bits else "")))
    if info.cpu.get("model"):
        out.append(("measured on", f"{info.cpu['model']} ({info.cpu.get('kernel', '?')} int8 kernels)"))
    out.append(("io dtype", info.io_dtype))
    r = info.size_ratio
    ratio = "" if not r else f" ({r:.2f}x smaller)" if r >= 1 else f" ({1 / r:.2f}x larger)"
    out.append(("size", f"{_size(info.size_before)} -> {_size(info.size_after)}{ratio}"))
    if info.float_ops:
        out.append(("ops left in float", ", ".join(f"{k} x{v}" for k, v in sorted(info.float_ops.items()))))
    ev = info.eval
    if ev is not None:
        if ev.accuracy_float is not None:
            out.append(
                (
                    "top-1 float -> quant",
                    f"{_pct(ev.accuracy_float)} -> {_pct(ev.accuracy_quant)} (drop {ev.drop_points:+.2f} pt)",
                )
            )
        out.append(("agreement / cosine", f"{_pct(ev.agreement)} / mean {ev.cosine_mean}, min {ev.cosine_min}"))
    out += _budget_rows(info)
    out += [("warning", w) for w in info.warnings]
    return out


def _budget_rows(info: QuantInfo) -> list[tuple[str, str]]:
    b = info.budget
    if b is None:
        return []
    verdict = "met" if b.met else "MISSED"
    out = [("budget", f"{b.budget}: {verdict} ({_measure(b.plain)} plain int8 -> {_measure(b.final)})")]
    if b.split:
        out.append(("budget data", b.data))
    if b.holdout:
        plain, final = b.holdout.get("plain", {}), b.holdout.get("final", {})
        out.append(("held-out cost", f"{_measure(plain)} plain int8 -> {_measure(final)}"))
    if b.graph:
        out.append(("budget graph", b.graph))
    if b.float_layers:
        names = ", ".join(f"{layer['name']} ({layer['op']})" for layer in b.float_layers)
        out.append(("kept in float", f"{names}; size {b.size_cost_pct:+.1f}% vs plain int8"))
    elif b.met:
        out.append(("kept in float", "none (plain int8 is within the budget)"))
    return out


def _measure(m: Mapping[str, Any]) -> str:
    parts = []
    if m.get("drop_points") is not None:
        parts.append(f"drop {m['drop_points']:.2f} pt")
    if m.get("agreement") is not None:
        parts.append(f"agreement {m['agreement'] * 100:.2f}%")
    if m.get("cosine_mean") is not None:
        parts.append(f"cosine {m['cosine_mean']:.6f}")
    return ", ".join(parts) or "-"


def render(data: Mapping[str, Any] | QuantInfo, title: str | None = None) -> str:
    """Aligned ``field: value`` lines (a title line first when given)."""
    pairs = rows(data)
    width = max(len(k) for k, _ in pairs)
    lines = [title] if title else []
    lines += [f"  {k.ljust(width)}  {v}" for k, v in pairs]
    return "\n".join(lines)


def summary(data: Mapping[str, Any] | QuantInfo) -> str:
    """One line for notes and logs: kind, calibration, size, accuracy cost, warnings."""
    info = data if isinstance(data, QuantInfo) else QuantInfo.from_json(dict(data))
    parts = [info.kind + (f" {info.granularity}" if info.granularity else "")]
    if info.method:
        parts.append(f"{info.method} on {info.samples} samples ({info.calibration_data})")
    if info.weight_bits:
        parts.append(f"{info.weight_bits}-bit weights")
    if info.size_ratio:
        parts.append(f"{_size(info.size_before)} -> {_size(info.size_after)} ({info.size_ratio:.2f}x)")
    ev = info.eval
    if ev is not None and ev.accuracy_float is not None:
        parts.append(f"top-1 {_pct(ev.accuracy_float)} -> {_pct(ev.accuracy_quant)} ({-(ev.drop_points or 0):+.2f} pt)")
    elif ev is not None:
        parts.append(f"agreement {_pct(ev.agreement)}, cosine {ev.cosine_mean}")
    if info.budget is not None and info.budget.float_layers:
        b = info.budget
        names = ", ".join(layer["name"] for layer in b.float_layers)
        parts.append(f"budget {b.budget}: kept in float {names} ({b.size_cost_pct:+.1f}% size)")
    elif info.budget is not None:
        parts.append(f"budget {info.budget.budget}: {'met by plain int8' if info.budget.met else 'MISSED'}")
    if info.budget is not None and isinstance(held := info.budget.holdout.get("final"), dict):
        split = info.budget.split
        searched, n = split.get("search_samples"), split.get("holdout_samples")
        parts.append(
            f"searched on {searched}, on {n} held-out samples: {_measure(held)} (graph: {info.budget.graph or '?'})"
        )
    parts += [f"WARNING: {w}" for w in info.warnings]
    return "; ".join(parts)
