"""What a model's lookup tables hold (Keras ``StringLookup``/``IntegerLookup``, and ``Discretization``'s
bucket boundaries), read as data.

Random samples miss a vocabulary: ids 0..9 or strings ``"sample 3"`` are all
out of vocabulary, so every runtime returns the same OOV index and a wrong
table would pass. An input that feeds a lookup table is sampled from the
table's keys plus out-of-vocabulary values (``lookup_values``), so
validation compares hits and misses. The converters read the same tables to
freeze them into ONNX ops (``fwx.converters._lookup_ops``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fwx.formats import Format
from fwx.signature import Signature
from fwx.sources.load import LoadedSource
from fwx.sources.tf_source import model_layers

#: A sample choice list longer than this takes an even spread of the keys (a 1M-id vocabulary needs no 1M choices).
MAX_CHOICES = 256
OOV_STRING = b"fwx-out-of-vocabulary"


@dataclass(frozen=True)
class CapturedTable:
    name: str  # the placeholder of the capture inside the function's graph
    handle: Any  # the captured resource handle (an eager tensor)
    keys: np.ndarray
    values: np.ndarray
    reader: str = ""  # the name of the lookup op that reads it (its scope names the Keras layer)

    @property
    def strings(self) -> bool:
        return self.keys.dtype.kind in "OSU"

    def label(self, names: dict[int, str] | None = None) -> str:
        """``"StringLookup layer 'words'"``: the Keras layer's own name where known, else its scope's."""
        known = (names or {}).get(id(self.handle))
        if known:
            return known
        kind = "StringLookup" if self.strings or self.values.dtype.kind in "OSU" else "IntegerLookup"  # or invert
        parts = self.reader.split("/")
        scope = next((parts[i - 1] for i in range(1, len(parts)) if parts[i].endswith("_Lookup")), None)
        return f"{kind} layer '{scope}'" if scope else f"{'string' if self.strings else 'integer'} lookup table"


def captured_tables(concrete: Any) -> list[CapturedTable]:
    """Every hash table a concrete ``tf.function`` captures, with its contents (``LookupTableExportV2``).

    Each table is exported with the key/value dtypes of the lookup that reads it, found by following the
    captured handle through the graph and the functions it calls: exporting with other dtypes is not an
    error but a CHECK failure that aborts the process.
    """
    import tensorflow as tf

    dtypes = table_dtypes(concrete.graph.as_graph_def(), [i.name for _, i in concrete.graph.captures])
    out: list[CapturedTable] = []
    for external, internal in concrete.graph.captures:
        found = dtypes.get(internal.name.split(":")[0])
        if external.dtype != tf.resource or found is None:
            continue
        tk, tv, reader = tf.as_dtype(found[0]), tf.as_dtype(found[1]), found[2]
        keys, values = tf.raw_ops.LookupTableExportV2(table_handle=external, Tkeys=tk, Tvalues=tv)
        out.append(CapturedTable(internal.name, external, keys.numpy(), values.numpy(), reader))
    return out


def table_dtypes(graph_def: Any, placeholders: list[str]) -> dict[str, tuple[int, int, str]]:
    """Placeholder node name -> (key, value) dtype enums and name of the ``LookupTableFindV2`` reading it."""
    funcs = {f.signature.name: f for f in graph_def.library.function}
    out: dict[str, tuple[int, int, str]] = {}
    names = {p.split(":")[0] for p in placeholders}
    _walk(list(graph_def.node), {n: n for n in names}, funcs, out, 0)
    return out


def _walk(nodes: list[Any], origin: dict[str, str], funcs: dict[str, Any], out: dict[str, Any], depth: int) -> None:
    """Follow captured handles (``origin``: local name -> placeholder) into lookups and called functions."""
    by_name = {n.name: n for n in nodes}

    def source(ref: str) -> str | None:
        name = ref.split(":")[0]
        for _ in range(64):  # Identity chains
            if name in origin:
                return origin[name]
            node = by_name.get(name)
            if node is None or node.op != "Identity" or not node.input:
                return None
            name = node.input[0].split(":")[0]
        return None

    for node in nodes:
        if node.op == "LookupTableFindV2":
            found = source(node.input[0])
            if found is not None:
                out[found] = (node.attr["Tin"].type, node.attr["Tout"].type, node.name)
            continue
        fn = funcs.get(node.attr["f"].func.name) if "f" in node.attr else None
        if fn is None or depth > 16:
            continue
        args = [r for r in node.input if not r.startswith("^")]
        inner = {a.name: src for a, r in zip(fn.signature.input_arg, args, strict=False) if (src := source(r))}
        if inner:
            _walk(list(fn.node_def), inner, funcs, out, depth + 1)


def lookup_values(src: LoadedSource, sig: Signature) -> dict[str, tuple[Any, ...]]:
    """Input name -> sample choices (keys and out-of-vocabulary values) for inputs that feed a lookup table."""
    try:
        if src.plan_format is Format.KERAS and src.obj is not None:
            tables = _keras_tables(src.obj)
        elif src.format is Format.SAVEDMODEL and src.path is not None and _has_lookups(src.path):
            tables = _savedmodel_tables(src.path)
        else:
            return {}
    except Exception:  # noqa: BLE001 - a model fwx cannot inspect keeps the default samples
        return {}
    out: dict[str, list[Any]] = {}
    for feeds, keys in tables:
        kind = [s.name for s in sig.inputs if _feeds_kind(s.dtype, keys.dtype.kind)]
        # a lone string or id input feeds the table somehow; a float input only counts when it is the one
        alone = len(kind) == 1 and keys.dtype.kind != "f"
        names = [feeds] if feeds in kind else (kind if alone else [])
        for name in names:
            out.setdefault(name, []).extend(_choices(keys))
    return {name: tuple(dict.fromkeys(v)) for name, v in out.items()}


def _feeds_kind(dtype: str, kind: str) -> bool:
    """Whether an input of ``dtype`` can feed keys of numpy ``kind`` (strings, integers, float boundaries)."""
    if kind in "OSU":
        return dtype == "bytes"
    if kind == "f":
        return dtype.startswith(("float", "bfloat"))
    return dtype.startswith(("int", "uint"))


def _choices(keys: np.ndarray) -> list[Any]:
    if keys.dtype.kind == "f":  # bucket boundaries: each one, a value inside every bucket, and both ends
        edges = sorted({float(k) for k in keys})
        inside = [(a + b) / 2 for a, b in zip(edges, edges[1:], strict=False)]
        return sorted({*edges, *inside, edges[0] - 1.0, edges[-1] + 1.0}) if edges else []
    keys = np.sort(keys)  # a hash table exports in no fixed order; samples must not depend on it
    if keys.size > MAX_CHOICES:
        keys = keys[np.linspace(0, keys.size - 1, MAX_CHOICES).astype(int)]
    if keys.dtype.kind in "OSU":
        return [bytes(k) if not isinstance(k, str) else k.encode() for k in keys] + [OOV_STRING]
    ints = [int(k) for k in keys]
    lo, hi = min(ints), max(ints)
    info = np.iinfo(keys.dtype)
    return ints + [v for v in (lo - 1, hi + 1) if info.min <= v <= info.max and v not in ints]


def _keras_tables(model: Any) -> list[tuple[str | None, np.ndarray]]:
    """(input name it reads, keys) for each Keras lookup layer, and (input, bin boundaries) for each
    ``Discretization``: normal samples around 0 all fall in the bucket below ``age >= 18``."""
    out: list[tuple[str | None, np.ndarray]] = []
    inputs = {id(t): str(getattr(t, "name", "")).split(":")[0] for t in getattr(model, "inputs", [])}
    for layer in model_layers(model):
        table = getattr(layer, "lookup_table", None)
        bounds = getattr(layer, "bin_boundaries", None) if type(layer).__name__ == "Discretization" else None
        if bounds is not None and len(bounds):
            keys = np.asarray(bounds, dtype=np.float64)
        elif table is None or not hasattr(table, "export"):
            continue
        else:
            keys = table.export()[0].numpy()
        feeds = None
        for node in getattr(layer, "_inbound_nodes", []):
            for t in getattr(getattr(node, "arguments", None), "keras_tensors", []):
                feeds = inputs.get(id(t), feeds)
        out.append((feeds, keys))
    return out


def _has_lookups(path: Any) -> bool:
    """Whether the SavedModel's graph has a table lookup (read from the protobuf, before TF loads anything)."""
    from pathlib import Path

    pb = Path(path) / "saved_model.pb"
    return pb.is_file() and b"LookupTableFindV2" in pb.read_bytes()


def _savedmodel_tables(path: Any) -> list[tuple[str | None, np.ndarray]]:
    import tensorflow as tf

    from fwx.quiet import quiet

    with quiet():
        loaded = tf.saved_model.load(str(path))
    key = "serving_default" if "serving_default" in loaded.signatures else next(iter(loaded.signatures))
    return [(None, t.keys) for t in captured_tables(loaded.signatures[key])]
