"""What each integer input of a functional Keras model is for, read from its layer graph.

Each layer call is a node that records the tensors it took; following a
tensor back through layers that keep its values (``Reshape``, ``Cast``...)
reaches the model input it came from. An ``Embedding`` bounds that input by
its ``input_dim``; an input passed as a ``*mask*`` argument (``attention_mask``
of ``MultiHeadAttention``) or into a selecting layer is a mask.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fwx.sources.tf_source import model_layers
from fwx.sources.torch_roles import Uses

#: Layers (and functional ops) whose output holds the input's values unchanged.
_KEEPS = frozenset(
    {"Reshape", "Flatten", "Permute", "Identity", "RepeatVector", "Cast", "ExpandDims", "Squeeze", "Cropping1D"}
)
#: Layers and ops a mask feeds.
_MASK_USES = frozenset(
    {"Multiply", "Where", "Equal", "NotEqual", "LogicalNot", "LogicalAnd", "LogicalOr", "Less", "Greater"}
)


def walk_keras(model: Any) -> Uses | None:
    """The tables and mask uses of a functional model's inputs; None for a model without a layer graph."""
    inputs = {id(t): str(getattr(t, "name", "")).split(":")[0] for t in getattr(model, "inputs", None) or []}
    if not inputs:
        return None
    uses = Uses()
    for layer in model_layers(model):
        kind = type(layer).__name__
        for node in getattr(layer, "_inbound_nodes", []):
            args = getattr(node, "arguments", None)
            if args is None:
                continue
            if kind == "Embedding":
                for t in getattr(args, "keras_tensors", [])[:1]:
                    for name in _origins(t, inputs):
                        uses.table(name, int(layer.input_dim), f"Keras Embedding layer {layer.name!r}")
            for key, value in (getattr(args, "kwargs", None) or {}).items():
                for t in _tensors(value):
                    for name in _origins(t, inputs) if "mask" in str(key).lower() else ():
                        uses.feeds(name, f"{kind}({key}=)")
            if kind in _MASK_USES:
                for t in getattr(args, "keras_tensors", []):
                    for name in _origins(t, inputs):
                        uses.feeds(name, kind)
    return uses


def _tensors(value: Any) -> Iterator[Any]:
    if isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif hasattr(value, "_keras_history"):
        yield value


def _origins(tensor: Any, inputs: dict[int, str], depth: int = 0) -> set[str]:
    """The model inputs whose values ``tensor`` holds unchanged."""
    if id(tensor) in inputs:
        return {inputs[id(tensor)]}
    history: Any = getattr(tensor, "_keras_history", None)
    op = getattr(history, "operation", None)
    if op is None or depth > 32 or type(op).__name__ not in _KEEPS:
        return set()
    nodes = getattr(op, "_inbound_nodes", [])
    node = nodes[history.node_index] if history.node_index < len(nodes) else None
    found: set[str] = set()
    for t in getattr(getattr(node, "arguments", None), "keras_tensors", [])[:1]:
        found |= _origins(t, inputs, depth + 1)
    return found
