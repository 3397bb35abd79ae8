"""SavedModel -> ONNX with tf2onnx over a ``tf.function`` carrying the pinned input signature.

tf2onnx's ``from_function`` names the ONNX inputs after the TensorSpec names and
the outputs after the returned dict's keys; the pinned dim symbols are then
written over tf2onnx's ``unk__N`` names.
"""

from __future__ import annotations

from pathlib import Path

from fwx.converters.base import Converter, ConvertOptions, ConvertResult, SourceModel
from fwx.frameworks import quiet, require
from fwx.formats import Format


class SavedModelToOnnx(Converter):
    source = Format.SAVEDMODEL
    target = Format.ONNX
    tool = "tf2onnx"
    honours = frozenset({"opset", "dynamic"})
    requires = (("tensorflow", "tf"), ("tf2onnx", "tf"), ("onnx", "onnx"))
    cost = 10

    def convert(self, src: SourceModel, out: Path, opts: ConvertOptions) -> ConvertResult:
        from fwx.exporter.onnx_common import tf2onnx_convert
        from fwx.exporter.tf_common import signature_fn, tf_function

        tf = require("tensorflow", "converting SavedModels")
        assert src.path is not None
        with quiet():
            loaded = tf.saved_model.load(str(src.path))
        fn = tf_function(signature_fn(loaded, src.signature, opts.saved_model_signature), src.signature)
        return tf2onnx_convert(fn, src, out, opts)
