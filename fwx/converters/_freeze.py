"""Captured constants of a ``tf.function`` become ONNX initializers, not graph inputs (issue 12 item 5).

Keras preprocessing layers with state (``Normalization`` adapted or given
``mean``/``variance``) keep plain tensors, not variables; a ``tf.function``
over the model (or over a SavedModel's restored signature, whose constants
are restored the same way) captures them as eager tensors. tf2onnx freezes
variables but turns such captures into extra graph inputs that no caller can
feed, so ONNX (and the torch formats made from it) would be unusable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fwx.converters.base import ConvertResult
from fwx.signature import Signature


def freeze_into(result: ConvertResult, fn: Any, sig: Signature, tables: set[str] | None = None) -> ConvertResult:
    """Freeze ``fn``'s captured constants in the ONNX file ``result.path``; note what was frozen.

    ``tables`` names captured lookup-table handles whose lookups were frozen into ops: their inputs go.
    """
    frozen = freeze_captures(result.path, captured_constants(fn), set(sig.input_names), tables or set())
    if frozen:
        result.notes.append(f"froze {len(frozen)} captured constant(s) into initializers: {', '.join(frozen[:4])}")
    return result


def captured_constants(fn: Any) -> dict[str, Any]:
    """The function's captured non-variable tensors (placeholder name -> value), e.g. Normalization's mean."""
    concrete = fn.get_concrete_function()
    out: dict[str, Any] = {}
    for external, internal in concrete.graph.captures:
        if external.dtype.name == "resource":  # variables: tf2onnx freezes these itself
            continue
        try:
            out[internal.name] = external.numpy()
        except (AttributeError, ValueError, TypeError):  # a symbolic capture has no value to freeze
            continue
    return out


def freeze_captures(path: Path, values: dict[str, Any], keep: set[str], drop: set[str] | None = None) -> list[str]:
    """Turn graph inputs that are captured constants into initializers, in place; returns their names.

    Inputs named in ``drop`` that no node reads any more (a frozen lookup's table handle) are removed.
    """
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    used = {name for node in model.graph.node for name in node.input}
    gone = [i for i in model.graph.input if i.name not in keep and i.name in (drop or set()) and i.name not in used]
    for vi in gone:
        model.graph.input.remove(vi)
    extra = [i for i in model.graph.input if i.name not in keep and i.name in values]
    if not extra and not gone:
        return []
    for vi in extra:
        model.graph.input.remove(vi)
        if vi.name in used:  # tf2onnx may leave the placeholder dangling: an unused initializer only warns
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(values[vi.name]), vi.name))
    onnx.save(model, str(path))
    return [vi.name for vi in (*extra, *gone)]
