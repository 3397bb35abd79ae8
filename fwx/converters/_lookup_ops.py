"""Keras ``IntegerLookup``/``StringLookup`` tables frozen into ONNX ops (issue 12 item 5).

A lookup layer keeps a TF hash table (a resource) that the ``tf.function``
captures; tf2onnx can only map it to ``CategoryMapper`` when it finds the
table's contents, which ``from_function`` never does, so ``LookupTableFindV2``
stayed a TF op and ONNX (and everything made from it) was out. The table is
static, so it is read here (``LookupTableExportV2`` on the captured handle) and
the lookup becomes ordinary ops through a tf2onnx handler:

- integer keys: a dense table over ``[min key, max key]`` read with ``Gather``
  (keys spread over at most ``DENSE_LIMIT`` values), else a comparison against
  every key (at most ``COMPARE_LIMIT`` keys); both are standard ops that
  fwx's ONNX -> PyTorch and ONNX -> TF translators read, so TorchScript,
  ``.pt2`` and (through ONNX -> SavedModel) TFLite follow;
- string keys: ``ai.onnx.ml`` ``LabelEncoder`` (onnxruntime runs it; torch
  has no string tensors, so the torch formats are refused by name).

A table too large for either is left alone and the conversion fails naming the
layer. Each node is named after its layer (``StringLookup layer 'words'``) so a
later hop that cannot hold it can say which layer stops it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fwx.sources.lookup_tables import captured_tables as read_tables
from fwx.sources.tf_source import model_layers

#: Integer keys spread over at most this many values get a dense table (8 MiB of int64).
DENSE_LIMIT = 1 << 20
#: Otherwise at most this many keys are compared one by one (a [..., keys] bool tensor per call).
COMPARE_LIMIT = 4096


@dataclass(frozen=True)
class Table:
    keys: np.ndarray
    values: np.ndarray
    label: str  # "IntegerLookup layer 'item_ids'", for messages and node names


class LookupFreezer:
    """The tables a function captures, and the tf2onnx handler that freezes their lookups."""

    def __init__(self, fn: Any, model: Any = None) -> None:
        from fwx.converters._freeze import captured_constants

        self.tables = captured_tables(fn, keras_labels(model))
        self.constants = captured_constants(fn) if self.tables else {}
        self.problems: list[str] = []
        self.frozen: list[str] = []

    def reset(self) -> None:
        """Forget the last conversion's findings (tf2onnx may be run again at a higher opset)."""
        self.problems.clear()
        self.frozen.clear()

    @property
    def handlers(self) -> dict[str, tuple[Any, list[Any]]]:
        # tf2onnx's handler args: the first is an op type to rename the node to (None: keep it)
        return {"LookupTableFindV2": (_handler, [None, self])} if self.tables else {}

    def note(self) -> str | None:
        return (
            f"froze {len(self.frozen)} lookup table(s) into ONNX ops: {', '.join(self.frozen)}" if self.frozen else None
        )


def keras_labels(model: Any) -> dict[int, str]:
    """id(table resource handle) -> ``"StringLookup layer 'name'"`` for a Keras model's lookup layers."""
    if model is None:
        return {}
    out: dict[int, str] = {}
    for layer in model_layers(model):
        table = getattr(layer, "lookup_table", None)
        handle = getattr(table, "resource_handle", None)
        if handle is not None:
            out[id(handle)] = f"{type(layer).__name__} layer '{layer.name}'"
    return out


def captured_tables(fn: Any, labels: dict[int, str] | None = None) -> dict[str, Table]:
    """Placeholder name -> contents of every hash table ``fn`` captures."""
    return {t.name: Table(t.keys, t.values, t.label(labels)) for t in read_tables(fn.get_concrete_function())}


def _handler(ctx: Any, node: Any, name: str, args: list[Any]) -> None:
    """``LookupTableFindV2(table, keys, default)`` -> standard ops (or ``LabelEncoder`` for strings)."""
    freezer: LookupFreezer = args[0]
    handle = node.inputs[0]
    while handle.type == "Identity":
        handle = handle.inputs[0]
    table = freezer.tables.get(handle.output[0])
    if table is None:
        freezer.problems.append(f"lookup {node.name!r}: its table was not found among the captured ones")
        raise ValueError(freezer.problems[-1])
    label = table.label
    default = _default(node, freezer.constants)
    if default is None:
        freezer.problems.append(f"{label}: its default (out-of-vocabulary) value is not a constant")
        raise ValueError(freezer.problems[-1])
    x, outputs = node.input[1], list(node.output)
    shapes, dtypes = [ctx.get_shape(x)], [ctx.get_dtype(outputs[0])]
    if table.values.dtype.kind not in "iu":  # e.g. invert=True: indices back to strings
        kind = "string" if table.values.dtype.kind in "OSU" else str(table.values.dtype)
        freezer.problems.append(f"{label}: a lookup to {kind} values (invert=True) is not frozen into ONNX ops")
        raise ValueError(freezer.problems[-1])
    if table.keys.dtype.kind in "OSU":
        ctx.remove_node(node.name)
        ctx.make_node(
            "LabelEncoder",
            [x],
            attr={
                "keys_strings": [bytes(k) for k in table.keys],
                "values_int64s": [int(v) for v in table.values],
                "default_int64": int(default),
            },
            outputs=outputs,
            name=_unique(ctx, label),
            domain="ai.onnx.ml",
            shapes=shapes,
            dtypes=dtypes,
        )
    else:
        why = _integer(ctx, node, table, default, label, shapes, dtypes)
        if why:
            freezer.problems.append(why)
            raise ValueError(why)
    freezer.frozen.append(label)


def _default(node: Any, constants: dict[str, Any]) -> Any:
    src = node.inputs[2]
    while src.type == "Identity":
        src = src.inputs[0]
    if src.is_const():
        return src.get_tensor_value(as_list=False)
    return constants.get(src.output[0])


def _unique(ctx: Any, name: str) -> str:
    n, out = 1, name
    while ctx.get_node_by_name(out) is not None:
        n += 1
        out = f"{name} #{n}"
    return out


def _integer(ctx: Any, node: Any, table: Table, default: Any, label: str, shapes: list[Any], dtypes: list[Any]) -> str:
    """Integer keys as a dense table read with ``Gather``, or as comparisons; returns why not ("" when done)."""
    keys, values = table.keys, table.values
    lo, hi = int(keys.min()), int(keys.max())
    x, scope = node.input[1], node.name
    dflt = np.asarray(default, dtype=values.dtype)

    def const(tag: str, v: Any) -> str:
        return str(ctx.make_const(f"{scope}/{tag}", np.asarray(v)).output[0])

    def op(kind: str, *inputs: str, **attr: Any) -> str:
        return str(ctx.make_node(kind, list(inputs), attr=attr or None, op_name_scope=scope).output[0])

    if hi - lo + 1 <= DENSE_LIMIT:
        dense = np.full(hi - lo + 1, dflt, dtype=values.dtype)
        dense[keys.astype(np.int64) - lo] = values
        i = op("Sub", x, const("lo", np.asarray(lo, keys.dtype)))
        zero = const("zero", np.asarray(0, keys.dtype))
        inside = op("Less", i, const("span", np.asarray(hi - lo + 1, keys.dtype)))
        outside = op("Or", op("Less", i, zero), op("Not", inside))
        got = op("Gather", const("table", dense), op("Where", outside, zero, i), axis=0)
        last, inputs = "Where", [outside, const("default", dflt), got]
    elif len(keys) <= COMPARE_LIMIT:
        hit = op("Equal", op("Unsqueeze", x, const("axis", np.array([-1], np.int64))), const("keys", keys))
        part = op("Mul", op("Cast", hit, to=dtypes[0]), const("shift", (values - dflt).astype(values.dtype)))
        summed = op("ReduceSum", part, const("sum_axis", np.array([-1], np.int64)), keepdims=0)
        last, inputs = "Add", [summed, const("default", dflt)]
    else:
        return (
            f"{label}: {len(keys)} integer keys spread over [{lo}, {hi}] are too many to freeze into ONNX ops "
            f"(at most {COMPARE_LIMIT} keys, or keys within {DENSE_LIMIT} consecutive values)"
        )
    outputs = list(node.output)
    ctx.remove_node(node.name)
    ctx.make_node(last, inputs, outputs=outputs, name=_unique(ctx, label), shapes=shapes, dtypes=dtypes)
    return ""
