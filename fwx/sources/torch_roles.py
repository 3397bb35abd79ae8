"""What each integer input of a PyTorch model is for, read from one run of the model.

A forward pass runs under a dispatch mode that follows every input's values
through the ops that move them without changing them (views, slices, casts)
and records where they end: the rows of the table an ``aten.embedding``,
``embedding_bag``, ``index_select``, ``gather``, ``take`` or ``index`` reads
with them (``input_ids`` -> 30522, ``token_type_ids`` -> 2), the classes of a
``one_hot`` (``one_hot(x, 50) @ W`` indexes W's 50 rows as surely as an
embedding does), or an op that only a mask feeds (a cast to bool, ``where``,
``masked_fill``, ``1 - mask``, a product, in place or as an ``einsum``, a
comparison, an attention mask). Values that went through arithmetic are not followed:
RoBERTa's position ids are ``cumsum(input_ids != pad) + pad``, and the
position table must not bound ``input_ids``.

TorchScript's interpreter does not run through Python dispatch modes cleanly,
so a ScriptModule's inlined graph is walked instead, with the same op sets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Ops whose output holds the input's values unchanged (in the same or a new shape or dtype).
KEEPS = frozenset(
    {
        "view",
        "reshape",
        "_unsafe_view",
        "expand",
        "expand_as",
        "slice",
        "select",
        "unsqueeze",
        "squeeze",
        "clone",
        "contiguous",
        "_to_copy",
        "to",
        "type_as",
        "flatten",
        "permute",
        "transpose",
        "t",
        "alias",
        "detach",
        "lift_fresh",
        "lift_fresh_copy",
        "long",
        "int",
        "repeat",
    }
)
#: Ops a mask feeds: it selects, zeroes, or is turned into an additive bias.
MASK_USES = frozenset(
    {
        "where",
        "masked_fill",
        "logical_not",
        "logical_and",
        "logical_or",
        "bitwise_not",
        "mul",
        "rsub",
        "neg",
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "scaled_dot_product_attention",
        "bool",
        "einsum",
        "bmm",
        "matmul",
        "mm",
    }
)


@dataclass
class Uses:
    """Per input: the smallest table it indexes (rows, where) and the mask-like ops it feeds."""

    rows: dict[str, tuple[int, str]] = field(default_factory=dict)
    mask_ops: dict[str, set[str]] = field(default_factory=dict)

    def table(self, name: str, rows: int, where: str) -> None:
        if name not in self.rows or rows < self.rows[name][0]:
            self.rows[name] = (int(rows), where)

    def feeds(self, name: str, op: str) -> None:
        self.mask_ops.setdefault(name, set()).add(op)


def base_op(op: str) -> str:
    """``mul_`` -> ``mul``: an in-place op uses its inputs as the op does (``_to_copy`` keeps its name)."""
    return op[:-1] if op.endswith("_") and not op.endswith("__") and len(op) > 1 else op


def _indexed(op: str, args: Sequence[Any]) -> list[tuple[Any, Any, int]]:
    """(index argument, table, axis) pairs an indexing op reads; empty for other ops."""
    if op in ("embedding", "_embedding_bag", "embedding_bag", "_embedding_bag_forward_only") and len(args) > 1:
        return [(args[1], args[0], 0)]
    if op == "take" and len(args) > 1:
        return [(args[1], args[0].reshape(-1), 0)]
    if op in ("scatter", "scatter_add", "scatter_reduce") and len(args) > 2 and isinstance(args[1], int):
        return [(args[2], args[0], args[1])]  # eager one_hot(x, n) is zeros(..., n).scatter_(-1, x, 1): n classes
    if op in ("index_select", "gather") and len(args) > 2 and isinstance(args[1], int):
        return [(args[2], args[0], args[1])]
    if op == "index" and len(args) > 1 and isinstance(args[1], (list, tuple)):
        return [(ix, args[0], axis) for axis, ix in enumerate(args[1]) if ix is not None]
    return []


def trace_eager(module: Any, names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> Uses:
    """Run ``module`` once on ``feeds`` (in ``names`` order) and follow the inputs' values."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    uses = Uses()
    taint: dict[int, frozenset[str]] = {}
    alive: list[Any] = []  # tainted tensors stay referenced, so no id is reused during the run

    def of(x: Any) -> frozenset[str]:
        return taint.get(id(x), frozenset()) if isinstance(x, torch.Tensor) else frozenset()

    class Follow(TorchDispatchMode):  # type: ignore[misc]
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            op = base_op(func.overloadpacket.__name__)
            for index, table, axis in _indexed(op, args):
                for ix in tree_flatten(index)[0]:
                    for name in of(ix):
                        n = table.shape[axis]
                        where = f"one_hot / {op} of {n} classes" if op.startswith("scatter") else None
                        uses.table(name, n, where or f"{op} of a {list(table.shape)} table")
            flat = tree_flatten((args, kwargs))[0]
            came = frozenset().union(*(of(a) for a in flat))
            if not came:
                return out
            if op in MASK_USES or (op == "_to_copy" and kwargs.get("dtype") == torch.bool):
                for name in came:
                    uses.feeds(name, "cast to bool" if op == "_to_copy" else op)
            if op in KEEPS:
                for o in tree_flatten(out)[0]:
                    if isinstance(o, torch.Tensor):
                        taint[id(o)] = came
                        alive.append(o)
            return out

    args = [torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in names]
    for name, t in zip(names, args, strict=True):
        taint[id(t)] = frozenset([name])
    with torch.no_grad(), Follow():
        module(*args)
    return uses


def walk_script(module: Any, names: Sequence[str]) -> Uses:
    """The same reading from a ScriptModule's inlined graph (no run): graph inputs after ``self`` are ``names``."""
    graph = module.inlined_graph
    inputs = list(graph.inputs())[1:]
    taint = {v.unique(): frozenset([n]) for v, n in zip(inputs, names, strict=False)}
    uses = Uses()
    _walk_block(graph, module, taint, uses)
    return uses


def _walk_block(block: Any, module: Any, taint: dict[int, frozenset[str]], uses: Uses) -> None:
    for node in block.nodes():
        for inner in node.blocks():
            _walk_block(inner, module, taint, uses)
        kind = node.kind()
        op = kind.split("::")[-1]
        ins = list(node.inputs())
        came = frozenset().union(*(taint.get(v.unique(), frozenset()) for v in ins))
        for at, rows in _script_tables(op, ins, module):
            for name in taint.get(ins[at].unique(), frozenset()):
                uses.table(
                    name, rows, f"{op} of a {rows}-row table" if op != "one_hot" else f"one_hot to {rows} classes"
                )
        if kind == "prim::If":  # a value chosen by a branch holds what either branch returns
            for out_i, out in enumerate(node.outputs()):
                got = [taint.get(list(b.returnNode().inputs())[out_i].unique(), frozenset()) for b in node.blocks()]
                taint[out.unique()] = frozenset().union(*got)
        if not came:
            continue
        if base_op(op) in MASK_USES:
            for name in came:
                uses.feeds(name, op)
        if op in KEEPS or kind in ("prim::ListConstruct", "prim::TupleConstruct"):
            for out in node.outputs():
                taint[out.unique()] = came


def _script_tables(op: str, ins: Sequence[Any], module: Any) -> list[tuple[int, int]]:
    """(position of the index input, rows it may reach) for a ScriptModule op that indexes; empty for others."""
    if op in ("embedding", "embedding_bag", "_embedding_bag") and len(ins) > 1:
        at, rows = 1, _script_rows(ins[0], module, None)
    elif op in ("index_select", "gather") and len(ins) > 2:
        at, rows = 2, _script_rows(ins[0], module, ins[1])
    elif op == "take" and len(ins) > 1:
        at, rows = 1, _script_rows(ins[0], module, None, numel=True)
    elif op == "one_hot" and len(ins) > 1:
        n = ins[1].toIValue()
        at, rows = 0, n if isinstance(n, int) and n > 0 else None
    else:
        return []
    return [] if rows is None else [(at, rows)]


def _script_rows(weight: Any, module: Any, dim: Any, *, numel: bool = False) -> int | None:
    """Rows of the table a ScriptModule op reads: its weight found by the ``prim::GetAttr`` chain from ``self``
    (through the branch of a ``prim::If`` that returns an attribute: ``F.embedding_bag`` picks its weight in one)."""
    path: list[str] = []
    value = _attr_branch(weight)
    while value.node().kind() == "prim::GetAttr":
        path.insert(0, value.node().s("name"))
        value = value.node().input()
    obj = module
    try:
        for part in path:
            obj = getattr(obj, part)
        axis = 0 if dim is None else int(dim.toIValue())
        return (int(obj.numel()) if numel else int(obj.shape[axis])) if path else None
    except (AttributeError, RuntimeError, TypeError, IndexError):
        return None


def _attr_branch(value: Any) -> Any:
    """``value``, or where it is a ``prim::If``'s output, the first branch's value read from ``self``."""
    if value.node().kind() != "prim::If":
        return value
    for block in value.node().blocks():
        picked = list(block.returnNode().inputs())[value.offset()]
        if picked.node().kind() == "prim::GetAttr":
            return picked
    return value
