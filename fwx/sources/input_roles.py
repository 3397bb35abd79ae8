"""What each integer input is: ids within the table it indexes, a mask, or neither; read from the model.

Random ids outside an embedding's range crash some runtimes and silently
clamp in others; inside it, every runtime must agree, and a ``Gather`` that is
wrong for ids >= 2 fails only if samples reach 2. Each integer input is
followed to the table it actually indexes: an ONNX graph's ``Gather``s, a
PyTorch model's ``aten.embedding``/``index_select``/``gather`` in one traced
run (``fwx.sources.torch_roles``), a Keras model's ``Embedding`` layers
(``fwx.sources.keras_roles``). A mask is an input that feeds what masks feed
(a cast to bool, ``where``, ``1 - mask``...) and no table; the name
(``*mask*``) decides only where the model could not be followed. Where a
model cannot be followed at all, its smallest table bounds every integer
input, as a conservative guess. Every choice is one line in ``notes``
(shown under the validation table and kept in fwx.json).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fwx.errors import first_line
from fwx.formats import Format
from fwx.runtimes.files import load_onnx
from fwx.signature import Signature
from fwx.sources.load import LoadedSource
from fwx.sources.samples import TRACE_INT_RANGE, InputConfig, is_mask, make_feeds, probe_sizes
from fwx.sources.torch_roles import Uses

#: ONNX ops whose output holds the input's values unchanged, and ops a mask feeds.
_ONNX_KEEPS = frozenset({"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand", "Slice"})
_ONNX_MASK_USES = frozenset({"Where", "Mul", "Sub", "Not", "And", "Or", "Equal", "Less", "Greater", "Einsum", "MatMul"})


@dataclass(frozen=True)
class InputRoles:
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)  # ids: [0, rows of the table)
    masks: frozenset[str] | None = None  # None: not decided here (the name decides)
    notes: dict[str, str] = field(default_factory=dict)  # input -> how its samples are chosen, and why


def id_ranges(src: LoadedSource, sig: Signature) -> dict[str, tuple[int, int]]:
    """Input name -> [0, rows) for integer inputs that index a table; empty when not readable."""
    return input_roles(src, sig).ranges


def input_roles(src: LoadedSource, sig: Signature) -> InputRoles:
    """The role of every integer input of ``sig``, followed through the loaded model where it can be."""
    ints = [s.name for s in sig.inputs if s.dtype.startswith(("int", "uint", "bool"))]
    if not ints:
        return InputRoles()
    try:
        uses, how = _uses(src, sig)
    except Exception as exc:  # noqa: BLE001 - a model fwx cannot follow keeps the guesses below
        uses, how = None, first_line(exc, 120)
    if uses is None:
        return _guessed(src, sig, ints, how)
    return roles_from(uses, sig, ints, how)


def roles_from(uses: Uses, sig: Signature, ints: list[str], how: str) -> InputRoles:
    """Roles from what the inputs were seen to feed; the name decides only for an input seen to feed nothing."""
    ranges: dict[str, tuple[int, int]] = {}
    masks: set[str] = set()
    notes: dict[str, str] = {}
    for name in ints:
        spec = sig.input(name)
        if name in uses.rows:
            rows, where = uses.rows[name]
            ranges[name] = (0, rows)
            notes[name] = f"ids in [0, {rows}): indexes {where} ({how})"
        elif name in uses.mask_ops and spec.rank >= 2 and spec.dtype != "bool":  # a bool mask may mean "ignore"
            masks.add(name)
            notes[name] = f"mask (1s, padding at the end): feeds {', '.join(sorted(uses.mask_ops[name]))} ({how})"
        elif is_mask(name):
            masks.add(name)
            notes[name] = f"mask (1s, padding at the end): by its name; {how} saw no use of it"
    return InputRoles(ranges, frozenset(masks), notes)


def _uses(src: LoadedSource, sig: Signature) -> tuple[Uses | None, str]:
    names = sig.input_names
    if src.format is Format.ONNX and src.path is not None:
        return onnx_uses(src.path, names), "followed in the ONNX graph"
    if src.plan_format is Format.KERAS and src.obj is not None:
        from fwx.sources.keras_roles import walk_keras

        return walk_keras(src.obj), "followed in the Keras layer graph"
    if src.plan_format is not Format.PYTORCH or src.obj is None:
        return None, ""
    import torch  # the source is a loaded torch module: torch is imported already

    from fwx.sources import torch_roles

    if isinstance(src.obj, torch.jit.ScriptModule):
        return torch_roles.walk_script(src.obj, names), "followed in the TorchScript graph"
    feeds = make_feeds(
        sig.inputs, probe_sizes(sig.inputs, None, src.sizes)[0], cfg=InputConfig(int_range=TRACE_INT_RANGE)
    )
    return torch_roles.trace_eager(src.obj, names, feeds), "followed in a traced run"


def _guessed(src: LoadedSource, sig: Signature, ints: list[str], why: str) -> InputRoles:
    """A model that cannot be followed: masks by name, every other integer input within the smallest table."""
    unfollowed = f"the model could not be followed{f': {why}' if why else ''}"
    masks = frozenset(n for n in ints if is_mask(n))
    notes = dict.fromkeys(masks, f"mask (1s, padding at the end): by its name ({unfollowed})")
    try:
        sizes = _torch_vocabs(src.obj) if src.plan_format is Format.PYTORCH else _keras_vocabs(src.obj)
    except Exception:  # noqa: BLE001 - no tables read: default ranges
        sizes = []
    ids = [n for n in ints if n not in masks and sig.input(n).dtype != "bool"]
    if not sizes:
        return InputRoles(masks=masks, notes=notes)
    smallest = min(sizes)
    for n in ids:
        notes[n] = f"ids in [0, {smallest}): the smallest of the model's tables ({unfollowed})"
    return InputRoles(dict.fromkeys(ids, (0, smallest)), masks, notes)


def onnx_id_ranges(path: Any, ids: list[str]) -> dict[str, tuple[int, int]]:
    """``ids`` (input names) -> [0, rows) of the smallest initializer table a ``Gather`` reads them from."""
    uses = onnx_uses(path, ids)
    return {n: (0, uses.rows[n][0]) for n in ids if n in uses.rows}


def onnx_uses(path: Any, names: list[str]) -> Uses:
    """Which ``Gather`` tables and mask-like ops each input reaches through value-keeping ops, in graph order."""
    graph = load_onnx(path).graph
    tables = {t.name: [int(d) for d in t.dims] for t in graph.initializer if len(t.dims) >= 1}
    taint = {n: frozenset([n]) for n in names}
    uses = Uses()
    scalars = _onnx_scalars(graph)
    for node in graph.node:
        if node.op_type == "OneHot" and len(node.input) >= 2 and (depth := scalars.get(node.input[1])):
            for name in taint.get(node.input[0], frozenset()):
                uses.table(name, depth, f"OneHot {node.name or node.output[0]!r} to {depth} classes")
        if node.op_type in ("Gather", "GatherElements") and len(node.input) >= 2 and node.input[0] in tables:
            dims = tables[node.input[0]]
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            for name in taint.get(node.input[1], frozenset()):
                if -len(dims) <= axis < len(dims):
                    uses.table(name, dims[axis], f"Gather {node.name or node.output[0]!r} of a {dims} table")
        came = frozenset().union(*(taint.get(i, frozenset()) for i in node.input))
        if not came:
            continue
        if node.op_type in _ONNX_MASK_USES:
            for name in came:
                uses.feeds(name, node.op_type)
        if node.op_type in _ONNX_KEEPS:
            taint[node.output[0]] = came
    return uses


def _onnx_scalars(graph: Any) -> dict[str, int]:
    """Positive integer constants of one value (a ``OneHot``'s depth), by tensor name."""
    from onnx import numpy_helper

    found = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            found[node.output[0]] = node.attribute[0].t
    out = {}
    for name, tensor in found.items():
        one = all(int(d) == 1 for d in tensor.dims) and tensor.data_type in (6, 7)  # INT32, INT64
        arr = numpy_helper.to_array(tensor) if one else None
        if arr is not None and arr.size == 1 and int(arr.reshape(-1)[0]) > 0:
            out[name] = int(arr.reshape(-1)[0])
    return out


def _torch_vocabs(module: Any) -> list[int]:
    import torch  # the source is a loaded torch module: torch is imported already

    kinds = (torch.nn.Embedding, torch.nn.EmbeddingBag)
    sizes = [int(m.weight.shape[0]) for m in module.modules() if isinstance(m, kinds)]
    for gm in (m for m in module.modules() if isinstance(m, torch.fx.GraphModule)):  # a .pt2 program
        for node in gm.graph.nodes:
            if node.op == "call_function" and "embedding" in str(node.target) and node.args:
                weight = node.args[0]
                val = getattr(weight, "meta", {}).get("val")
                if val is None and getattr(weight, "op", "") == "get_attr":
                    val = gm.get_parameter(str(weight.target))
                if val is not None and len(val.shape) == 2:
                    sizes.append(int(val.shape[0]))
    return sizes


def _keras_vocabs(model: Any) -> list[int]:
    import keras  # the source is a loaded Keras model: keras is imported already

    from fwx.sources.tf_source import model_layers

    return [int(layer.input_dim) for layer in model_layers(model) if isinstance(layer, keras.layers.Embedding)]
