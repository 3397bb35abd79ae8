"""Keras -> ONNX with tf2onnx and an explicit input signature (Keras 3 needs one).

The model is wrapped in the same named ``tf.function`` the SavedModel edge
writes, so both artifacts have the pinned input and output names.

Keras preprocessing layers with state (``Normalization`` adapted or given
``mean``/``variance``, and any layer that keeps plain tensors rather than
variables) are captured by the ``tf.function`` as eager tensors. tf2onnx
freezes variables but turns such captures into extra graph inputs, which no
caller can feed; they are frozen into initializers (``_freeze.py``).
``IntegerLookup``/``StringLookup`` tables are frozen into ONNX ops (``_lookup.py``).
"""

from __future__ import annotations

from pathlib import Path

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
        sig = hop_signature(src.signature, opts.static_shapes, src.sample_inputs)
        fn = tf_function(keras_fn(src.obj, sig), sig)
        return tf2onnx_convert(fn, sig, src, out, opts, keras_model=src.obj)
