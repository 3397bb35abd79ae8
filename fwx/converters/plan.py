"""The planner: every path from a source format to a target, shortest first.

The exporter tries the paths in order and keeps the first whose artifact
validates, so a tool that "succeeds" with wrong numbers loses to one that is
right (recorded per hop in ``fwx.json``).

Every path that can work is offered: a path visits each format once, except
that it may come back to the source's own format once, through other tools
(a SavedModel whose LSTM the TFLite converter rejects, ``TensorListReserve``,
reaches TFLite as SavedModel -> ONNX -> SavedModel -> TFLite: the second
SavedModel is fwx's translation, with no TensorList ops).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from fwx.converters import registry as _registry  # noqa: F401 - fills the edge table
from fwx.converters.base import Converter, ConvertOptions, EdgeEntry, edge_class, edges
from fwx.errors import ExportError, MissingDependencyError
from fwx.formats import TARGETS, Format

MAX_HOPS = 4


@dataclass(frozen=True)
class Plan:
    hops: tuple[EdgeEntry, ...]

    @property
    def cost(self) -> int:
        return sum(edge_class(h).cost for h in self.hops)

    def describe(self) -> str:
        if not self.hops:
            return "(identity)"
        parts = [str(self.hops[0].source)]
        for h in self.hops:
            parts.append(f"--[{edge_class(h).tool}]--> {h.target}")
        return " ".join(parts)

    def to_json(self) -> list[dict[str, str]]:
        return [
            {"source": str(h.source), "target": str(h.target), "tool": edge_class(h).tool, "module": h.module}
            for h in self.hops
        ]


#: Targets whose quantisation is a post-processing step on the float artifact
#: (fwx.quantize.onnx), so no edge needs to honour ``quantize`` for them.
POST_QUANTIZED: frozenset[Format] = frozenset({Format.ONNX})


def honours(classes: list[type[Converter]], opts: ConvertOptions) -> bool:
    """Whether a path (its edges, in order) can give what ``opts`` asks.

    Quantisation and the opset are properties of the last hop's artifact; a
    forced layout needs some hop that can move the channels (the rest carry the
    layout they are given), else the version would hold artifacts that take
    different tensors for the same input. ``--static-shapes`` likewise needs a
    hop that fixes the shapes (the later ones carry them).
    """
    last = classes[-1]
    if opts.quantize and "quantize" not in last.honours and last.target not in POST_QUANTIZED:
        return False
    if opts.opset is not None and last.target is Format.ONNX and "opset" not in last.honours:
        return False
    if opts.static_shapes and not any("static_shapes" in c.honours for c in classes):
        return False
    return not (opts.layout and not any("layout" in c.honours for c in classes))


def plans(
    source: Format, target: Format, opts: ConvertOptions | None = None, *, include_unavailable: bool = False
) -> list[Plan]:
    """All simple paths source -> target (at most ``MAX_HOPS``), cheapest first."""
    opts = opts or ConvertOptions()
    table = edges()
    found: list[Plan] = []
    queue: deque[tuple[Format, tuple[EdgeEntry, ...]]] = deque([(source, ())])
    while queue:
        node, path = queue.popleft()
        if len(path) >= MAX_HOPS:
            continue
        for (src, dst), entries in table.items():
            if src is not node or not _may_visit(dst, source, path):
                continue
            for entry in entries:
                cls = edge_class(entry)
                if not include_unavailable and cls.missing():
                    continue
                new = (*path, entry)
                if dst is target:
                    if honours([edge_class(h) for h in new], opts):
                        found.append(Plan(new))
                else:
                    queue.append((dst, new))
    found.sort(key=lambda p: (len(p.hops), p.cost))
    return found


def _may_visit(fmt: Format, source: Format, path: tuple[EdgeEntry, ...]) -> bool:
    """A format once per path; the source's format once more, written by another tool than the user's."""
    visited = [h.source for h in path]
    if fmt is source:
        return visited.count(source) == 1 and bool(path)
    return fmt not in visited


def best_plans(source: Format, target: Format, opts: ConvertOptions | None = None) -> list[Plan]:
    """Like ``plans`` but raises a clear error when there is no way at all."""
    if source is target:
        if opts and (opts.layout or opts.static_shapes):  # a copy keeps the source's layout and shapes
            raise ExportError(
                f"fwx cannot convert {source} to {target}{_asked(opts)}",
                hint=f"a {target} source is copied as it is; drop the option for this target",
            )
        return [Plan(())]
    found = plans(source, target, opts)
    if found:
        return found
    blocked = plans(source, target, opts, include_unavailable=True)
    if blocked:  # name what the cheapest blocked path lacks, and the extra that installs it
        module, extra = next(m for h in blocked[0].hops for m in edge_class(h).missing())
        raise MissingDependencyError(module, extra, f"converting {source} to {target}")
    raise ExportError(
        f"fwx cannot convert {source} to {target}{_asked(opts)}",
        hint="run `fwx export --plan` to see the reachable targets",
    )


def plans_or_none(source: Format, target: Format, opts: ConvertOptions | None = None) -> list[Plan]:
    """``best_plans``, or no plan instead of an error (for a target that has another way, such as a copy)."""
    try:
        return best_plans(source, target, opts)
    except (ExportError, MissingDependencyError):
        return []


def _asked(opts: ConvertOptions | None) -> str:
    """The options that narrowed the search, as the user typed them."""
    asked = [
        f"--quantize {opts.quantize}" if opts and opts.quantize else "",
        f"--layout {opts.layout}" if opts and opts.layout else "",
        f"--opset {opts.opset}" if opts and opts.opset is not None else "",
        "--static-shapes" if opts and opts.static_shapes else "",
    ]
    return (" with " + " ".join(a for a in asked if a)) if any(asked) else ""


def reachable(source: Format, opts: ConvertOptions | None = None) -> list[Format]:
    """Targets reachable from ``source`` with what is installed."""
    copy_ok = not (opts and (opts.layout or opts.static_shapes))
    return [t for t in TARGETS if (t is source and copy_ok) or plans(source, t, opts)]
