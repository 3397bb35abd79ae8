"""``ai.onnx.ml`` ops: ``LabelEncoder`` as a TF hash table (a Keras ``StringLookup`` frozen by fwx).

The table is a ``tf.lookup.StaticHashTable`` made outside the trace and kept
on the module, so the SavedModel saves it as an asset-free resource and the
TFLite converter writes its builtin ``HASHTABLE`` ops (string -> int64 and
int64 -> string; other pairs stay TF ops and TFLite says so).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from fwx.converters.onnx_tf.context import NodeCtx
from fwx.converters.onnx_tf.table import op
from fwx.errors import ExportError

#: (keys attribute, values attribute, default attribute) per LabelEncoder form (opset 2 attributes).
_FORMS = (
    ("keys_strings", "values_int64s", "default_int64"),
    ("keys_int64s", "values_int64s", "default_int64"),
    ("keys_int64s", "values_strings", "default_string"),
    ("keys_strings", "values_strings", "default_string"),
)
_DEFAULTS = {"default_int64": -1, "default_string": "_Unused"}


def _table(c: NodeCtx, keys: np.ndarray, values: np.ndarray, default: Any) -> Any:
    """One table per distinct content, made eagerly and tracked on the module (the trace may run twice)."""
    store = c.env.store
    cache: dict[Any, Any] = store.__dict__.setdefault("_tables", {}) if store is not None else {}
    key = (tuple(keys.tolist()), tuple(values.tolist()), repr(default))
    if key not in cache:
        with tf.init_scope():
            init = tf.lookup.KeyValueTensorInitializer(tf.constant(keys), tf.constant(values))
            cache[key] = tf.lookup.StaticHashTable(init, default_value=default)
        if store is not None:  # tracked, so the SavedModel saves the table with the function that reads it
            if not hasattr(store.module, "lookup_tables"):
                store.module.lookup_tables = []
            store.module.lookup_tables.append(cache[key])
    return cache[key]


def _array(values: list[Any], strings: bool) -> np.ndarray:
    if strings:
        return np.array([v if isinstance(v, bytes) else str(v).encode() for v in values], dtype=object)
    return np.asarray(values, dtype=np.int64)


@op("ai.onnx.ml::LabelEncoder")
def _label_encoder(c: NodeCtx) -> Any:
    form = next((f for f in _FORMS if c.attr(f[0]) is not None and c.attr(f[1]) is not None), None)
    if form is None or len(c.attr(form[0])) != len(c.attr(form[1])):
        raise ExportError(
            f"ONNX {c.node.label}: only string/int64 keys and values are translated",
            hint="float keys or values (keys_floats, values_floats) have no TF hash table here",
        )
    k_attr, v_attr, d_attr = form
    default = c.attr(d_attr, _DEFAULTS[d_attr])
    v_strings = v_attr == "values_strings"
    if v_strings and isinstance(default, str):
        default = default.encode()
    table = _table(c, _array(c.attr(k_attr), k_attr == "keys_strings"), _array(c.attr(v_attr), v_strings), default)
    return table.lookup(c.t(0))
