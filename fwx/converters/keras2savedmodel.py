"""Keras -> SavedModel with one ``serving_default`` endpoint named after the pinned signature.

``keras.export.ExportArchive`` tracks the model's variables (a bare
``tf.saved_model.save`` of a Keras 3 model does not); the endpoint's inputs carry
the pinned names with ``None`` for dynamic dims, and it returns a dict keyed by
the pinned output names, so TF Serving, TFLite and tf2onnx all see those names.
"""

from __future__ import annotations

from pathlib import Path

from fwx.converters._tf import keras_fn, tf_specs
from fwx.converters.base import Converter, ConvertOptions, ConvertResult, SourceModel
from fwx.errors import ExportError, first_line
from fwx.formats import Format
from fwx.frameworks import require
from fwx.quiet import quiet
from fwx.signature import hop_signature

SERVING_KEY = "serving_default"


class KerasToSavedModel(Converter):
    source = Format.KERAS
    target = Format.SAVEDMODEL
    tool = "keras.export.ExportArchive"
    honours = frozenset({"dynamic", "static_shapes"})
    requires = (("tensorflow", "tf"), ("keras", "tf"))
    cost = 5

    def convert(self, src: SourceModel, out: Path, opts: ConvertOptions) -> ConvertResult:
        keras = require("keras", "exporting Keras models")
        tf = require("tensorflow", "exporting Keras models")
        sig = hop_signature(src.signature, opts.static_shapes, src.sample_inputs)
        try:
            with quiet():
                archive = keras.export.ExportArchive()
                archive.track(src.obj)
                archive.add_endpoint(name=SERVING_KEY, fn=keras_fn(src.obj, sig), input_signature=tf_specs(sig))
                archive.write_out(str(out), verbose=False)
        except Exception as exc:  # noqa: BLE001
            raise ExportError(
                f"writing the SavedModel failed: {first_line(exc)}",
                hint="check that the model runs on the pinned --input shapes",
            ) from exc
        return ConvertResult(
            out,
            sig,
            tool=self.tool,
            tool_version=f"keras {keras.__version__}, tensorflow {tf.__version__}",
            layout=src.layout,
        )
