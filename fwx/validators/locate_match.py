"""Pair an artifact's intermediate tensors with the reference's, by the names converters keep.

Names first, shapes only as a last resort:

* the same tensor or node name (an INT8 ONNX against its float ONNX, TFLite
  against TFLite), a torch.onnx node name compared by module scope and op
  (``scoped_node``: a ScriptModule's conversion spells ``layer1.0`` as ``0``);
* a scope the artifact's name sits in: torch.onnx names nodes after module
  scopes (``/layer1/layer1.0/conv1/Conv`` is module ``layer1.0.conv1``), Keras
  and tf2onnx keep layer names (``functional_1/c1_1/Relu`` is layer ``c1``),
  fwx's ONNX->TF translator names TF ops after ONNX nodes
  (``inner_stem_Conv/Conv2D`` is node ``/stem/Conv``), and TFLite joins the
  TF names of the ops it fused with ``;`` (the first is the op that wrote the
  tensor). A reference layer pairs with the LAST artifact tensor inside it:
  a layer's output is the last thing it computes;
* without a shared name, the longest common subsequence of (rank, size) in
  graph order: tensors are paired only where both graphs agree on the order.

A reference layer with no tensor of its own in the artifact (a BatchNorm
folded into the convolution before it) is offered to the pair before it as an
alternative: the fused output equals the folded layer's, not the conv's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: The attribute fwx's torch exporters wrap a model in (``fwx.converters._torch``): a scope of its own.
WRAPPER = "inner"


@dataclass(frozen=True)
class Probe:
    """One intermediate tensor a tracer exposes, with what its format says about where it came from."""

    tensor: str  # the tensor's name in the model
    node: str  # the node (op, layer, module) that produced it
    op: str  # the op type (or layer/module class)
    scope: str = ""  # the source layer or module, where the format keeps it (torch.onnx scopes)
    inputs: tuple[str, ...] = ()  # tensors the node read, where the format says (for the downstream check)


@dataclass(frozen=True)
class Pair:
    cand: int  # index into the artifact's trace
    refs: tuple[int, ...]  # reference indices it may equal: its own first, then layers fused into it


def sanitize(name: str) -> str:
    """The TF name scope fwx's ONNX->TF translator gives an ONNX node (``translate._scope``)."""
    raw = re.sub(r"[^A-Za-z0-9_.\-]", "_", name).lstrip("_.-")
    return raw if raw and raw[0].isalnum() else f"n{raw}"


def torch_scope(node: str) -> str:
    """``/layer1/layer1.0/conv1/Conv`` -> ``layer1.0.conv1``: the module a torch.onnx node sits in."""
    if not node.startswith("/"):
        return ""
    parts = [c for c in node.split("/")[:-1] if c]
    return _qualified(parts[1:] if parts[:1] == [WRAPPER] else parts)


def scoped_node(node: str) -> str:
    """``/layer1/0/conv1/Conv`` and ``/layer1/layer1.0/conv1/Conv`` -> ``layer1.0.conv1/Conv``: one key for a
    torch.onnx node however the exporter spelled its scope (a ScriptModule's conversion writes ``0``, the
    module's own ``layer1.0``). Empty for names that are not torch.onnx scopes."""
    scope = torch_scope(node)
    return f"{scope}/{node.rsplit('/', 1)[-1]}" if scope else ""


def _qualified(parts: Sequence[str]) -> str:
    """Join scope parts into a qualified name; torch.onnx writes a Sequential's child already qualified
    (``layer1/layer1.0``), so a part that extends the one before it replaces it."""
    name, prev = "", ""
    for part in parts:
        if prev and part.startswith(prev + "."):
            name = name[: len(name) - len(prev)] + part
        else:
            name = f"{name}.{part}" if name else part
        prev = part
    return name


class _Index:
    """Reference names -> reference index (first wins: a module called twice pairs with its first call)."""

    def __init__(self, probes: Sequence[Probe]) -> None:
        self.exact: dict[str, int] = {}
        self.scoped: dict[str, int] = {}
        for i, p in enumerate(probes):
            self.exact.setdefault(p.tensor, i)
            self.exact.setdefault(p.node, i)
            if scoped_node(p.node):
                self.exact.setdefault(scoped_node(p.node), i)
            self.scoped.setdefault(p.node, i)
            self.scoped.setdefault(sanitize(p.node), i)

    def resolve(self, probe: Probe) -> tuple[list[int], str]:
        """Reference indices ``probe`` may be the output of, innermost first, and how they were found."""
        for name in (probe.tensor, probe.node, scoped_node(probe.node)):
            if name and name in self.exact:
                return [self.exact[name]], "tensor names"
        for piece in [*probe.tensor.split(";"), probe.node]:
            hits = self._scoped([c for c in piece.split("/") if c])
            if hits:
                return hits, "layer names"
        return [], ""

    def _scoped(self, parts: list[str]) -> list[int]:
        for start in range(len(parts)):  # a wrapper module's scope ("inner") may sit around the model's own
            hits: list[int] = []
            for j in range(len(parts), start, -1):  # torch.onnx scopes: the module and every module around it
                i = self.scoped.get(_qualified(parts[start:j]))
                if i is not None and i not in hits:
                    hits.append(i)
            if hits:
                return hits
        for part in reversed(parts):
            i = self._component(part)
            if i is not None:
                return [i]
        return []

    def _component(self, part: str) -> int | None:
        if part in self.scoped:
            return self.scoped[part]
        base = re.sub(r"_\d+$", "", part)  # Keras 3 scopes layer "c1" as "c1_1"
        if base in self.scoped:
            return self.scoped[base]
        for k, ch in enumerate(part):  # the translator's wrapper prefix: "inner_stem_Conv" holds "stem_Conv"
            if ch == "_" and part[k + 1 :] in self.scoped:
                return self.scoped[part[k + 1 :]]
        return None


def pair(
    ref: Sequence[Probe], cand: Sequence[Probe], ref_sizes: Sequence[int], cand_sizes: Sequence[int]
) -> tuple[list[Pair], str]:
    """Pairs in the artifact's graph order, and how they were matched (for the report)."""
    index = _Index(ref)
    last: dict[int, int] = {}  # reference index -> the last artifact tensor inside it
    how: dict[int, str] = {}
    for c, probe in enumerate(cand):
        hits, method = index.resolve(probe)
        for r in hits:
            if ref_sizes[r] == cand_sizes[c]:
                last[r] = c
                how[r] = method
    owner: dict[int, int] = {}  # artifact tensor -> the innermost reference layer that ends in it
    for r in sorted(last, key=lambda r: (last[r], -_depth(ref[r]), r)):
        owner.setdefault(last[r], r)
    if owner:
        methods = [how[r] for r in owner.values()]
        method = max(set(methods), key=methods.count)
        return _with_folded(owner, ref_sizes), method
    return _by_shape(ref_sizes, cand_sizes, ref, cand), "shape and position (no shared names)"


def _depth(p: Probe) -> int:
    return p.node.count(".") + p.node.count("/")


def _with_folded(owner: dict[int, int], ref_sizes: Sequence[int]) -> list[Pair]:
    paired = sorted(set(owner.values()))
    pairs = []
    for c in sorted(owner):
        r = owner[c]
        later = [p for p in paired if p > r]
        stop = later[0] if later else len(ref_sizes)
        folded = tuple(k for k in range(r + 1, stop) if ref_sizes[k] == ref_sizes[r])
        pairs.append(Pair(c, (r, *folded)))
    return pairs


def _by_shape(
    ref_sizes: Sequence[int], cand_sizes: Sequence[int], ref: Sequence[Probe], cand: Sequence[Probe]
) -> list[Pair]:
    """Longest common subsequence of sizes (capped: a graph of thousands of nodes would take minutes)."""
    n, m = min(len(ref), 1500), min(len(cand), 1500)
    table = np.zeros((n + 1, m + 1), dtype=np.int32)
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            table[i, j] = (
                table[i + 1, j + 1] + 1 if ref_sizes[i] == cand_sizes[j] else max(table[i + 1, j], table[i, j + 1])
            )
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        if ref_sizes[i] == cand_sizes[j]:
            pairs.append(Pair(j, (i,)))
            i, j = i + 1, j + 1
        elif table[i + 1, j] >= table[i, j + 1]:
            i += 1
        else:
            j += 1
    return pairs
