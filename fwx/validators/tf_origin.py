"""The Keras layer each node of a tf2onnx graph came from, including the nodes tf2onnx made up.

tf2onnx names a node after the TF op it converts (``functional_1/c1_1/Relu``
is layer ``c1``: Keras 3 scopes every call with a ``_N`` suffix, the model's
own scope included), but the nodes it adds while rewriting (a layout
``Transpose__29``, a fused ``Conv__43``, a ``Shape__33``) carry a counter and
no scope. Such a node takes the layer its own output or its weights are named
after (tf2onnx often keeps the TF tensor name there); else a node that only
moves data (a layout transpose, a shape) belongs to the nearest named node it
feeds, and one that computes, with no name to go by, is placed between the
nearest named layers before and after it rather than guessed into one.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

#: A counter tf2onnx appends to the names it makes up (``Conv__43``, ``new_shape__37``).
GENERATED = re.compile(r"__\d+$")
#: Ops that only move or describe data: they belong to the layer they feed.
_MOVES_DATA = frozenset(
    {"Transpose", "Reshape", "Shape", "Gather", "Cast", "Squeeze", "Unsqueeze", "Concat", "Slice", "Identity"}
)
#: Scopes around the model's own that a ``tf.function`` adds.
_WRAPPERS = frozenset({"StatefulPartitionedCall", "PartitionedCall"})


def keras_layer(name: str) -> str:
    """``functional_1/c1_1/Relu`` -> ``c1``; "" for a name with no model/layer/op scope."""
    if name.startswith("/"):
        return ""  # a torch.onnx scope (``/layer1/conv/Conv``)
    parts = [p for p in name.split(":")[0].split("/") if p]
    while parts and parts[0] in _WRAPPERS:
        parts.pop(0)
    if len(parts) < 3:
        return ""
    model, layer = parts[0], parts[1]
    return re.sub(r"_\d+$", "", layer) if re.search(r"_\d+$", model) else layer


def tf2onnx_origins(graph: Any) -> dict[str, str]:
    """Node name -> ``layer NAME`` for the nodes of a tf2onnx graph whose layer can be told; empty otherwise."""
    nodes = list(graph.node)
    if not any(keras_layer(n.name) for n in nodes):
        return {}  # not a graph tf2onnx wrote from a Keras model
    producer = {o: n for n in nodes for o in n.output}
    readers: dict[str, list[Any]] = {}
    for n in nodes:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    weights = {t.name for t in graph.initializer}
    own = {n.name: _named(n, weights) for n in nodes}

    def downstream(n: Any) -> Iterable[Any]:
        return (r for o in n.output for r in readers.get(o, ()))

    def upstream(n: Any) -> Iterable[Any]:
        return (producer[i] for i in n.input if i in producer)

    out = {}
    for n in nodes:
        if own[n.name]:
            out[n.name] = f"layer {own[n.name]}"
            continue
        down, up = _nearest(n, downstream, own), _nearest(n, upstream, own)
        if n.op_type in _MOVES_DATA or not (up and down) or up == down:
            layer = down or up if n.op_type in _MOVES_DATA else up or down
            if layer:
                out[n.name] = f"layer {layer}"
        else:
            out[n.name] = f"between layer {up} and layer {down}"
    return out


def _named(node: Any, weights: set[str]) -> str:
    """The layer a node's own name, an output's name or a weight's name gives; "" when none does."""
    for name in (node.name, *node.output, *(i for i in node.input if i in weights)):
        if layer := keras_layer(name):
            return layer
    return ""


def _nearest(start: Any, step: Callable[[Any], Iterable[Any]], own: dict[str, str], limit: int = 8) -> str:
    """The layer of the first node with one, breadth first from ``start`` along ``step``, at most ``limit`` deep."""
    queue, seen = deque([(start, 0)]), {start.name}
    while queue:
        node, depth = queue.popleft()
        if depth >= limit:
            continue
        for nxt in step(node):
            if nxt.name in seen:
                continue
            if own.get(nxt.name):
                return own[nxt.name]
            seen.add(nxt.name)
            queue.append((nxt, depth + 1))
    return ""
