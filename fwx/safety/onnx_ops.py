"""Check an ONNX graph's op domains, read from the protobuf as data.

onnxruntime runs ops from the default domain and ``ai.onnx.ml`` itself, and
``com.microsoft`` contrib ops are compiled into onnxruntime too (its quantiser
and transformer optimiser emit them). Any other domain can only run through a
custom-op library (native code, or Python ops from onnxruntime-extensions), so
an untrusted model using one is refused, naming the node. Local functions
(``model.functions``) are expanded from standard ops and are checked as well.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

#: Domains whose kernels ship inside onnxruntime itself.
STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})


def _graphs(graph: Any) -> Iterator[Any]:
    """A graph and every subgraph in its nodes' attributes (If/Loop/Scan bodies), depth first."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _graphs(attr.g)
            for sub in attr.graphs:
                yield from _graphs(sub)


def nonstandard_ops(model: Any) -> list[str]:
    """``domain::op_type (node name)`` of every node outside the standard domains."""
    local = {(f.domain, f.name) for f in model.functions}
    found: list[str] = []

    def check(nodes: Any, where: str) -> None:
        for n in nodes:
            if n.domain not in STANDARD_DOMAINS and (n.domain, n.op_type) not in local:
                found.append(f"{n.domain}::{n.op_type} (node {n.name or '?'}{where})")

    for g in _graphs(model.graph):
        check(g.node, "")
    for f in model.functions:
        check(f.node, f" in function {f.domain}::{f.name}")
        for n in f.node:
            for attr in n.attribute:
                if attr.HasField("g"):
                    for g in _graphs(attr.g):
                        check(g.node, f" in function {f.domain}::{f.name}")
    return found
