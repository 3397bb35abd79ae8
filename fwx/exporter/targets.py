"""Which targets an export makes, by which paths, and which ``--to all`` may skip.

Explicitly named targets (``--to onnx,tflite``) fail the export on any error.
``--to all`` means "every format fwx can make from this model": a target with
no path, or whose conversion fails (an op the format lacks, a tool error), is
skipped with its one-line reason, recorded in fwx.json's ``skipped``, and the
other targets are still exported. A validation failure (wrong numbers) is
never skipped. ``--layout`` is settled here too: a layout equal to the
source's is dropped, and NCHW is refused for a channels-last source.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from fwx import ui
from fwx.converters.base import ConvertOptions
from fwx.converters.plan import Plan, best_plans, plans_or_none
from fwx.errors import FwxError, UsageError
from fwx.formats import LAYOUTS, NCHW, NHWC, TARGETS, Format, parse_format
from fwx.sources.boundary import format_of
from fwx.sources.load import is_factory_ref

#: The layout of a source format's image inputs, where the format alone tells (ONNX needs its graph).
FORMAT_LAYOUT: dict[Format, str] = {Format.PYTORCH: NCHW, Format.KERAS: NHWC, Format.SAVEDMODEL: NHWC}


@dataclass
class Selection:
    """The targets to export with their paths, cheapest first, and those ``--to all`` left out."""

    plans: dict[Format, list[Plan]]
    skipped: dict[Format, str] = field(default_factory=dict)
    optional: frozenset[Format] = frozenset()  # asked for only through ``all``: a failure skips them


def run_order(plans: Mapping[Format, list[Plan]]) -> list[Format]:
    """The order to export targets in: those that other targets' paths pass through first, most used first.

    A target's own artifact is read back and validated before another target
    converts it further, so a file that bakes a pinned dynamic axis is found
    once, and the other targets skip their paths through it (the runner closes
    that prefix). Ties keep the ``TARGETS`` order; summaries and fwx.json list
    targets in ``TARGETS`` order whatever this is.
    """
    used = dict.fromkeys(plans, 0)
    for fmt, found in plans.items():
        for plan in found:
            for hop in plan.hops[:-1]:
                if hop.target in used and hop.target is not fmt:
                    used[hop.target] += 1
    rank = {fmt: i for i, fmt in enumerate(TARGETS)}
    return sorted(plans, key=lambda f: (-used[f], rank.get(f, len(rank))))


def _target(text: str) -> Format:
    try:
        return parse_format(text)
    except FwxError:  # the generic hint would list source-only formats, which --to then refuses
        raise UsageError(
            f"unknown format {text!r} for --to", hint=f"use one of: {', '.join(t.value for t in TARGETS)}, all"
        ) from None


def parse_targets(values: Sequence[str | Format]) -> list[str | Format]:
    """``--to`` values, repeated and/or comma separated; ``all`` stays a marker until the source is known."""
    out: list[str | Format] = []
    for value in values:
        parts = [value] if isinstance(value, Format) else [p for p in str(value).split(",") if p.strip()]
        for part in parts:
            fmt = part if isinstance(part, Format) else ("all" if part.strip().lower() == "all" else _target(part))
            if fmt not in out:
                out.append(fmt)
    if not out:
        raise UsageError("no target format given", hint="pass --to torchscript|pt2|savedmodel|onnx|tflite|all")
    for fmt in out:
        if isinstance(fmt, Format) and fmt not in TARGETS:
            raise UsageError(
                f"{fmt} is not an export target", hint=f"use one of: {', '.join(t.value for t in TARGETS)}, all"
            )
    return out


def start_format(source: str | Path) -> Format:
    """Where the planner starts for ``source``, from content detection only (nothing is loaded)."""
    if isinstance(source, str) and is_factory_ref(source):
        return Format.PYTORCH
    fmt = format_of(source)
    return Format.PYTORCH if fmt in (Format.TORCHSCRIPT, Format.PT2) else fmt


def copied_formats(source: str | Path) -> frozenset[Format]:
    """Targets the source already is although the planner starts elsewhere: a ``.pt2`` is copied, not re-exported.

    Re-exporting a program with fresh ``Dim``s fails on its own range constraints
    ("Constraints violated"); the copy is read back and validated like any artifact.
    """
    if isinstance(source, str) and is_factory_ref(source):
        return frozenset()
    return frozenset({Format.PT2}) if format_of(source) is Format.PT2 else frozenset()


def select(
    start: Format, targets: Sequence[str | Format], opts: ConvertOptions, copies: frozenset[Format] = frozenset()
) -> Selection:
    """Plan every requested target; raises before any heavy work for a named target that has no path.

    A target in ``copies`` tries the copy first, then the planner's paths.
    """
    named = [t for t in targets if isinstance(t, Format)]
    every = "all" in targets
    plans: dict[Format, list[Plan]] = {}
    skipped: dict[Format, str] = {}
    for fmt in TARGETS:
        if fmt in copies and (fmt in named or every) and not (opts.layout or opts.static_shapes):
            plans[fmt] = [Plan(()), *plans_or_none(start, fmt, opts)]
        elif fmt in named:
            plans[fmt] = best_plans(start, fmt, opts)
        elif every:
            try:
                plans[fmt] = best_plans(start, fmt, opts)
            except FwxError as exc:
                skipped[fmt] = exc.message
    if not plans:
        why = "; ".join(f"{fmt}: {reason}" for fmt, reason in skipped.items())
        raise UsageError(
            f"no target is reachable from {start} ({why})" if why else f"no target is reachable from {start}",
            hint="run `fwx export --plan` to see the paths",
        )
    return Selection(plans, skipped, frozenset(f for f in plans if f not in named))


def decide(
    start: Format,
    targets: Sequence[str | Format],
    opts: ConvertOptions,
    source_layout: str | None,
    *,
    known: bool,
    copies: frozenset[Format] = frozenset(),
) -> tuple[ConvertOptions, Selection]:
    """The convert options with ``--layout`` settled against the source's, and the targets' paths under them."""
    settled = settle_layout(replace(opts, layout=layout_option(opts.layout)), source_layout, known=known)
    return settled, select(start, targets, settled, copies)


def layout_option(value: str | None) -> str | None:
    if value is None or value == "":
        return None
    if value.lower() not in LAYOUTS:
        raise UsageError(f"unknown --layout {value!r}", hint="use nchw or nhwc")
    return value.lower()


def settle_layout(opts: ConvertOptions, source: str | None, *, known: bool) -> ConvertOptions:
    """``opts`` with ``--layout`` dropped when the source already has it; refuses NCHW for an NHWC source.

    ``source`` is the source's layout (None: no 4-D input, or not ``known`` yet).
    """
    want = opts.layout
    if not want or (source is None and not known):
        return opts
    if source is None:
        ui.warn(f"--layout {want} ignored: the model has no 4-D image input")
        return replace(opts, layout=None)
    if want == source:
        return replace(opts, layout=None)
    if source == NHWC:
        raise UsageError(
            "--layout nchw cannot be applied to a channels-last (NHWC) model",
            hint="fwx moves channels only from NCHW to NHWC (in the ONNX -> SavedModel hop); "
            "drop --layout to keep NHWC",
        )
    return opts
