"""The graph around a located node: the compared nodes it reads from, and nodes only one side has.

Pure: probes and node errors in, names out (``fwx.validators.locate`` decides).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from fwx.validators.locate_match import Probe
from fwx.validators.mismatch import NodeError


def _compared_inputs(pos: int, compared: Mapping[int, int], cand: Sequence[Probe]) -> tuple[set[int], set[int]]:
    """The compared nodes (layer indices) the artifact tensor at ``pos`` reads from, through unpaired nodes,
    and the positions of those unpaired nodes. Without graph information: the compared node before it."""
    if not any(p.inputs for p in cand):
        before = [k for q, k in compared.items() if q < pos]
        return ({max(before)} if before else set()), set()
    producer = {p.tensor: i for i, p in enumerate(cand)}
    found, between, todo, seen = set(), set(), list(cand[pos].inputs), set()
    while todo:
        q = producer.get(todo.pop())
        if q is None or q in seen or q >= pos:
            continue
        seen.add(q)
        if q in compared:
            found.add(compared[q])
        else:
            between.add(q)
            todo.extend(cand[q].inputs)
    return found, between


def with_inputs(layers: list[NodeError], cand: Sequence[Probe]) -> list[NodeError]:
    """Each compared node with the worst ratio of the compared nodes it reads from."""
    by_tensor = {p.tensor: i for i, p in enumerate(cand)}
    compared = {by_tensor[n.tensor]: k for k, n in enumerate(layers) if n.tensor in by_tensor}
    out = []
    for node in layers:
        pos = by_tensor.get(node.tensor, -1)
        ups, _ = _compared_inputs(pos, compared, cand) if pos >= 0 else (set(), set())
        out.append(replace(node, inputs_ratio=max((layers[k].ratio for k in ups), default=0.0)))
    return out


def unpaired_between(node: NodeError, layers: Sequence[NodeError], cand: Sequence[Probe]) -> list[str]:
    """Artifact nodes with no reference counterpart between ``node`` and the compared nodes it reads from."""
    by_tensor = {p.tensor: i for i, p in enumerate(cand)}
    compared = {by_tensor[n.tensor]: k for k, n in enumerate(layers) if n.tensor in by_tensor}
    pos = by_tensor.get(node.tensor, -1)
    if pos < 0 or not any(p.inputs for p in cand):
        return []
    _, between = _compared_inputs(pos, compared, cand)
    named = [f"{cand[q].node!r} ({cand[q].op})" for q in sorted(between) if cand[q].op not in _PLUMBING]
    return named if len(named) <= _INSERTED else []  # more is a gap in the pairing, not an insertion


def missing(node: NodeError, layers: Sequence[NodeError], ref: Sequence[Probe], inserted: Sequence[str]) -> list[str]:
    """Reference nodes the artifact has no counterpart of, between ``node``'s reference and the paired ones it
    reads from: a node a converter or a fault removed. Only where the reference records its graph, and never an
    op the artifact's node itself computes (a quantiser folds the Conv before a ReLU into one node)."""
    if not any(p.inputs for p in ref):
        return []
    index = {p.node: i for i, p in reversed(list(enumerate(ref)))}
    start = index.get(node.reference)
    if start is None:
        return []
    paired = {index.get(n.reference) for n in layers}  # the reference each compared node was judged against
    producer = {p.tensor: i for i, p in enumerate(ref)}
    todo, seen, missing = list(ref[start].inputs), set(), []
    while todo:
        q = producer.get(todo.pop())
        if q is None or q in seen or q in paired:
            continue
        seen.add(q)
        missing.append(q)
        todo.extend(ref[q].inputs)
    ops = {node.op.lower()} | {n.rsplit("(", 1)[-1].rstrip(")").lower() for n in inserted}
    kept = [q for q in sorted(missing) if ref[q].op not in _PLUMBING and ref[q].op.lower() not in ops]
    named = [f"{ref[q].node!r} ({ref[q].op})" for q in kept]
    return named if len(named) <= _INSERTED else []


#: Unpaired nodes named at most: a fault inserts one or two; a run of them means fwx could not pair a stretch.
_INSERTED = 2


#: Ops that move or relabel data; a converter adds them everywhere, they are never the news.
_PLUMBING = {
    "Identity",
    "Reshape",
    "Flatten",
    "Transpose",
    "Squeeze",
    "Unsqueeze",
    "Cast",
    "Shape",
    "Gather",
    "Concat",
    "Constant",
    "QuantizeLinear",
    "DequantizeLinear",
    "RESHAPE",
    "TRANSPOSE",
    "QUANTIZE",
    "DEQUANTIZE",
}
