"""Keras -> ONNX with tf2onnx and an explicit input signature (Keras 3 needs one).

The model is wrapped in the same named ``tf.function`` the SavedModel edge
writes, so both artifacts have the pinned input and output names.

Keras preprocessing layers with state (``Normalization`` adapted or given
``mean``/``variance``, and any layer that keeps plain tensors rather than
variables) are captured by the ``tf.function`` as eager tensors. tf2onnx
freezes variables but turns such captures into extra graph inputs, which no
caller can feed; they are frozen here into initializers with their values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fwx.converters._onnx import tf2onnx_convert
from fwx.converters._tf import keras_fn, tf_function
from fwx.converters.base import Converter, ConvertOptions, ConvertResult, SourceModel
from fwx.formats import Format
from fwx.signature import hop_signature


class KerasToOnnx(Converter):
    source = Format.KERAS
    target = Format.ONNX
    tool = "tf2onnx"
    honours = frozenset({"opset", "dynamic", "static_shapes"})
    requires = (("tensorflow", "tf"), ("keras", "tf"), ("tf2onnx", "tf"), ("onnx", "onnx"))
    cost = 10

    def convert(self, src: SourceModel, out: Path, opts: ConvertOptions) -> ConvertResult:
        sig = hop_signature(src.signature, opts.static_shapes, opts.sample_inputs)
        fn = tf_function(keras_fn(src.obj, sig), sig)
        result = tf2onnx_convert(fn, sig, src, out, opts)
        frozen = freeze_captures(out, captured_constants(fn), set(sig.input_names))
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


def freeze_captures(path: Path, values: dict[str, Any], keep: set[str]) -> list[str]:
    """Turn graph inputs that are captured constants into initializers, in place; returns their names."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    extra = [i for i in model.graph.input if i.name not in keep and i.name in values]
    if not extra:
        return []
    used = {name for node in model.graph.node for name in node.input}
    for vi in extra:
        model.graph.input.remove(vi)
        if vi.name in used:  # tf2onnx may leave the placeholder dangling: an unused initializer only warns
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(values[vi.name]), vi.name))
    onnx.save(model, str(path))
    return [vi.name for vi in extra]
