"""Graph rewrites done before translation.

The legacy PyTorch exporter spells exact GELU as ``x * 0.5 * (1 + erf(x / sqrt 2))``.
TFLite has no ERF builtin but has GELU, so the five nodes become one ``Gelu``
(exact, like the original). A stray ``Erf`` still translates, with a builtin-only
rational approximation.
"""

from __future__ import annotations

import math

import numpy as np

from fwx.converters.onnx_tf.model import Graph, Node


def _constants(graph: Graph) -> dict[str, np.ndarray]:
    consts = dict(graph.initializers)
    for n in graph.nodes:
        if n.op == "Constant" and "value" in n.attrs:
            consts[n.outputs[0]] = np.asarray(n.attrs["value"])
    return consts


def _is(consts: dict[str, np.ndarray], name: str, value: float) -> bool:
    v = consts.get(name)
    return v is not None and v.size == 1 and math.isclose(float(v.reshape(-1)[0]), value, rel_tol=1e-5)


class _Matcher:
    def __init__(self, graph: Graph) -> None:
        self.consts = _constants(graph)
        self.producer = {o: n for n in graph.nodes for o in n.outputs}
        self.users: dict[str, list[Node]] = {}
        for n in graph.nodes:
            for i in n.inputs:
                self.users.setdefault(i, []).append(n)
        self.outputs = {s.name for s in graph.outputs}

    def only_user(self, name: str, op: str) -> Node | None:
        users = self.users.get(name, [])
        if len(users) == 1 and users[0].op == op and name not in self.outputs:
            return users[0]
        return None

    def other(self, node: Node, name: str) -> str:
        return node.inputs[1] if node.inputs[0] == name else node.inputs[0]

    def gelu(self, erf: Node) -> tuple[str, list[Node]] | None:
        """(x, matched nodes) when ``erf`` sits in an exact-GELU pattern."""
        div = self.producer.get(erf.inputs[0])
        if div is None or self.only_user(div.outputs[0], "Erf") is None:
            return None
        scale = {"Div": math.sqrt(2), "Mul": 1 / math.sqrt(2)}.get(div.op)
        if scale is None or not _is(self.consts, div.inputs[1], scale):
            return None
        x = div.inputs[0]
        add = self.only_user(erf.outputs[0], "Add")
        if add is None or not _is(self.consts, self.other(add, erf.outputs[0]), 1.0):
            return None
        mul = self.only_user(add.outputs[0], "Mul")
        if mul is None:
            return None
        last = self.only_user(mul.outputs[0], "Mul")
        if last is None:
            return None
        partner, final = self.other(mul, add.outputs[0]), self.other(last, mul.outputs[0])
        if (partner == x and _is(self.consts, final, 0.5)) or (_is(self.consts, partner, 0.5) and final == x):
            return x, [div, erf, add, mul, last]
        return None


def fuse_gelu(graph: Graph) -> int:
    """Replace exact-GELU subgraphs in place; return how many were fused."""
    m = _Matcher(graph)
    drop: set[int] = set()
    replace: dict[int, Node] = {}
    for erf in (n for n in graph.nodes if n.op == "Erf"):
        found = m.gelu(erf)
        if found is None:
            continue
        x, nodes = found
        drop.update(id(n) for n in nodes)
        last = nodes[-1]
        replace[id(last)] = Node("Gelu", "", last.name or "gelu", [x], list(last.outputs), {"approximate": "none"})
    if replace:
        graph.nodes = [replace.get(id(n), n) for n in graph.nodes if id(n) not in drop or id(n) in replace]
    return len(replace)
