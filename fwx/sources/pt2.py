"""Reading a ``torch.export`` program's input signature as data.

Inputs that share a ``Dim`` (``input_ids`` and ``attention_mask`` share batch
and sequence) carry the same SymInt symbol in the program (``s43``); they get
the same pinned symbol, so samples, re-exports and artifacts keep them equal.
A symbol on a leading axis is the batch, ``N``; another keeps the name of the
first input axis that carries it (``input_ids_d1``). A dim that is an
expression of symbols (``10*s0``) gets a symbol of its own, shared by every
input axis with the same expression.

The program admits only the sizes its ``Dim``s allow (``Dim("seq", min=16)``,
``10 * Dim("frames")``, ``y`` twice as long as ``x``), and fwx's own sample
sizes (8 and 12, batch 1 and 3) may lie outside them. ``pt2_sizes`` picks two
sizes the program admits for each pinned symbol that needs them, computed from
one value per ``Dim`` so that related axes stay related; probing, tracing and
validation all draw at those sizes.
"""

from __future__ import annotations

import re
from typing import Any

from fwx.decimal_text import is_digits
from fwx.signature import BATCH, Dim, Signature, TensorSpec, normalize_dtype
from fwx.sources.guards import guards, holds, sizes_read
from fwx.sources.samples import InputConfig, size_plans

_SYMBOL = re.compile(r"^[a-z]+\d+$")


def pt2_inputs(ep: Any) -> tuple[TensorSpec, ...] | None:
    """The user inputs of an ExportedProgram (SymInt dims become shared symbols), or None if unreadable."""
    shapes = _shapes(ep)
    if shapes is None:
        return None
    batch = {str(val.shape[0]) for _, val in shapes if val.shape and _SYMBOL.match(str(val.shape[0]))}
    chosen: dict[str, str] = dict.fromkeys(batch, BATCH) if len(batch) == 1 else {}
    inputs = []
    for name, val in shapes:
        dims: list[Dim] = []
        for axis, d in enumerate(val.shape):
            text = str(d)
            if is_digits(text.lstrip("-")):
                dims.append(int(text))
            elif _SYMBOL.match(text):
                dims.append(
                    chosen.setdefault(text, BATCH if axis == 0 and not chosen and not batch else f"{name}_d{axis}")
                )
            else:
                dims.append(chosen.setdefault(text, f"{name}_d{axis}"))
        inputs.append(TensorSpec(name, normalize_dtype(str(val.dtype)), tuple(dims)))
    return tuple(inputs)


def _shapes(ep: Any) -> list[tuple[str, Any]] | None:
    names = list(ep.graph_signature.user_inputs)
    placeholders = [
        n for n in ep.graph.nodes if n.op == "placeholder" and n.name in names and hasattr(n.meta.get("val"), "shape")
    ]
    if len(placeholders) != len(names):
        return None
    return [(n.name, n.meta["val"]) for n in placeholders]


#: fwx's own sample sizes (``probe_sizes``, ``size_plans``) lie within [1, _DEFAULT_HI] (batch) or
#: [2, _DEFAULT_HI] (others); a Dim whose range holds those and that no other axis derives from needs nothing.
_DEFAULT_HI = 16
#: The values tried for a Dim that does need sizes (clamped into its range): batch-like, then others.
_WANTED = {True: (2, 3), False: (8, 12)}


def pt2_sizes(ep: Any, inputs: tuple[TensorSpec, ...] | None) -> dict[str, tuple[int, int]]:
    """Two sizes the program admits for each pinned symbol of ``inputs`` whose ``Dim`` range rules out
    fwx's own sample sizes or that is an expression of a ``Dim`` (``10*s0``) or shares one with such an axis.

    Each ``Dim`` takes two values inside its range (``range_constraints``); every axis's sizes are its
    expression at those values, so ``y`` stays twice ``x``. Empty when the defaults fit.
    """
    shapes = _shapes(ep)
    if not inputs or shapes is None:
        return {}
    exprs: dict[str, Any] = {}  # pinned symbol -> its sympy expression
    for spec, (_, val) in zip(inputs, shapes, strict=True):
        for d, size in zip(spec.shape, val.shape, strict=True):
            node = getattr(size, "node", None)
            if isinstance(d, str) and node is not None:
                exprs.setdefault(d, node.expr)
    ranges = {str(k): v for k, v in ep.range_constraints.items()}
    leading = {str(exprs[s.shape[0]]) for s in inputs if s.rank and isinstance(s.shape[0], str) and s.shape[0] in exprs}
    needed = {str(f) for e in exprs.values() if not e.is_Symbol for f in e.free_symbols}
    for e in exprs.values():
        if e.is_Symbol and not _fits_defaults(ranges.get(str(e)), batch=str(e) in leading):
            needed.add(str(e))
    needed |= {str(exprs[sym]) for sym in _refused_defaults(ep, inputs, exprs) if exprs[sym].is_Symbol}
    if not needed:
        return {}
    values: dict[str, tuple[int, int]] = {}
    for f in sorted(needed):  # distinct values per Dim where the ranges allow: outputs are matched by size
        values[f] = _two_values(ranges.get(f), batch=f in leading, taken={v for p in values.values() for v in p})
    out: dict[str, tuple[int, int]] = {}
    for sym, e in exprs.items():
        free = {str(f) for f in e.free_symbols}
        if free and free <= needed:
            pair = tuple(int(e.subs({f: values[str(f)][i] for f in e.free_symbols})) for i in (0, 1))
            out[sym] = (pair[0], pair[1])
    return out


def _refused_defaults(ep: Any, inputs: tuple[TensorSpec, ...], exprs: dict[str, Any]) -> set[str]:
    """Pinned symbols in a guard of the program that fwx's own validation sizes (batch 1 and 3, other dims
    8 and 12) break. ``torch.export`` checks more than the ``Dim`` ranges on every call (``_guards_code``):
    an ``nn.EmbeddingBag`` over 2-D ids records ``batch >= 2`` although its ``Dim`` starts at 1."""
    checks = guards(ep)
    if not checks:
        return set()
    axes = {(spec.name, axis): d for spec in inputs for axis, d in enumerate(spec.shape)}
    refused: set[str] = set()
    for plan in size_plans(Signature(inputs), InputConfig()):  # what validation draws by default

        def size(name: str, axis: int, plan: dict[str, int] = plan) -> int:
            d = axes[(name, axis)]
            return plan[d] if isinstance(d, str) else int(d)

        for check in checks:
            if not holds(check, size):
                refused |= {d for key in sizes_read(check) if isinstance(d := axes.get(key), str) and d in exprs}
    return refused


def _bounds(vr: Any) -> tuple[int, int | None]:
    """A ValueRanges as (lo, hi); hi None when unbounded (``int_oo``)."""
    if vr is None:
        return 0, None
    return _finite(vr.lower) or 0, _finite(vr.upper)


def _finite(x: Any) -> int | None:
    try:  # int(int_oo) fails inside sympy; older programs wrote sys.maxsize - 1 for "no bound"
        v = int(x)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return None
    return v if abs(v) < 1 << 62 else None


def _fits_defaults(vr: Any, *, batch: bool) -> bool:
    lo, hi = _bounds(vr)
    return lo <= (1 if batch else 2) and (hi is None or hi >= _DEFAULT_HI)


def _two_values(vr: Any, *, batch: bool, taken: set[int] | None = None) -> tuple[int, int]:
    lo, hi = _bounds(vr)
    lo = max(lo, 2)  # torch.export specialises 0 and 1
    top = hi if hi is not None else max(lo, _DEFAULT_HI) + 1
    a, b = (min(max(w, lo), top) for w in _WANTED[batch])
    if a == b:  # both clamped to one end: take its neighbour inside the range
        b = a + 1 if a + 1 <= top else max(lo, a - 1)
    step = 0
    while taken and {a, b} & taken and b + 2 <= top and step < 64:  # another Dim has these: move up
        a, b, step = a + 2, b + 2, step + 1
    return a, b
