"""The planner: every path from a source format to a target, shortest first.

The exporter tries the paths in order and keeps the first whose artifact
validates, so a tool that "succeeds" with wrong numbers loses to one that is
right (recorded per hop in ``fwx.json``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from fwx.converters import registry as _registry  # noqa: F401 - fills the edge table
from fwx.converters.base import Converter, ConvertOptions, EdgeEntry, edge_class, edges
from fwx.errors import ExportError
from fwx.formats import Format

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
        return [{"source": str(h.source), "target": str(h.target), "tool": edge_class(h).tool,
                 "module": h.module} for h in self.hops]


#: Targets whose quantisation is a post-processing step on the float artifact
#: (fwx.quantize.onnx), so no edge needs to honour ``quantize`` for them.
POST_QUANTIZED: frozenset[Format] = frozenset({Format.ONNX})


def _honours(cls: type[Converter], opts: ConvertOptions, is_last: bool) -> bool:
    if opts.quantize and is_last and "quantize" not in cls.honours and cls.target not in POST_QUANTIZED:
        return False
    return not (opts.opset is not None and cls.target is Format.ONNX and is_last and "opset" not in cls.honours)


def plans(source: Format, target: Format, opts: ConvertOptions | None = None,
          *, include_unavailable: bool = False) -> list[Plan]:
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
            if src is not node or dst in {h.source for h in path} or dst is source:
                continue
            for entry in entries:
                cls = edge_class(entry)
                if not include_unavailable and cls.missing():
                    continue
                new = (*path, entry)
                if dst is target:
                    if _honours(cls, opts, True) and all(_honours(edge_class(h), opts, False) for h in path):
                        found.append(Plan(new))
                else:
                    queue.append((dst, new))
    found.sort(key=lambda p: (len(p.hops), p.cost))
    return found


def best_plans(source: Format, target: Format, opts: ConvertOptions | None = None) -> list[Plan]:
    """Like ``plans`` but raises a clear error when there is no way at all."""
    if source is target:
        return [Plan(())]
    found = plans(source, target, opts)
    if found:
        return found
    blocked = plans(source, target, opts, include_unavailable=True)
    if blocked:
        missing = sorted({f"{m} (pip install 'fwx[{e}]')" for p in blocked for h in p.hops
                          for m, e in edge_class(h).missing()})
        raise ExportError(f"no installed converter takes {source} to {target}",
                          hint="install: " + ", ".join(missing))
    why = " with --quantize" if opts and opts.quantize else ""
    raise ExportError(f"fwx cannot convert {source} to {target}{why}",
                      hint="run `fwx export --plan` to see the reachable targets")


def reachable(source: Format, opts: ConvertOptions | None = None) -> list[Format]:
    """Targets reachable from ``source`` with what is installed."""
    from fwx.formats import TARGETS

    return [t for t in TARGETS if t is source or plans(source, t, opts)]
