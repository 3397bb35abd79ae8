"""SavedModel -> ONNX with tf2onnx over a ``tf.function`` carrying the pinned input signature.

tf2onnx's ``from_function`` names the ONNX inputs after the TensorSpec names and
the outputs after the returned dict's keys; the pinned dim symbols are then
written over tf2onnx's ``unk__N`` names. Restored constants the function
captures (Keras preprocessing state) are frozen, not left as graph inputs.
"""

from __future__ import annotations

from pathlib import Path

from fwx.converters._onnx import tf2onnx_convert
from fwx.converters._tf import signature_fn, tf_function
from fwx.converters.base import Converter, ConvertOptions, ConvertResult, SourceModel
from fwx.formats import Format
from fwx.frameworks import require
from fwx.quiet import quiet
from fwx.signature import hop_signature


class SavedModelToOnnx(Converter):
    source = Format.SAVEDMODEL
    target = Format.ONNX
    tool = "tf2onnx"
    honours = frozenset({"opset", "dynamic", "static_shapes"})
    requires = (("tensorflow", "tf"), ("tf2onnx", "tf"), ("onnx", "onnx"))
    cost = 10
    prefetchable = True

    def convert(self, src: SourceModel, out: Path, opts: ConvertOptions) -> ConvertResult:
        tf = require("tensorflow", "converting SavedModels")
        assert src.path is not None
        with quiet():
            loaded = tf.saved_model.load(str(src.path))
        sig = hop_signature(src.signature, opts.static_shapes, src.sample_inputs)
        fn = tf_function(signature_fn(loaded, sig, opts.saved_model_signature), sig)
        return tf2onnx_convert(fn, sig, src, out, opts)  # lookup tables and Normalization constants frozen in
