"""SavedModel -> TFLite (float32) with ``TFLiteConverter.from_saved_model``.

Converting from the SavedModel's serving signature keeps its input/output names
in the TFLite signature runner and keeps dynamic dims as ``shape_signature``
-1 (measured on TF 2.21). Quantisation (``--quantize``) is delegated to
``fwx.quantize.tflite.convert_quantized``, which converts with the calibration
data, checks the written model's op types and returns the receipt that goes to
fwx.json.
"""

from __future__ import annotations

from pathlib import Path

from fwx.converters.base import Converter, ConvertOptions, ConvertResult, SourceModel
from fwx.errors import ExportError
from fwx.frameworks import first_line, quiet, require
from fwx.formats import Format


class SavedModelToTFLite(Converter):
    source = Format.SAVEDMODEL
    target = Format.TFLITE
    tool = "tf.lite.TFLiteConverter"
    honours = frozenset({"dynamic", "quantize"})
    requires = (("tensorflow", "tf"), ("ai_edge_litert", "tflite"))
    cost = 10

    def convert(self, src: SourceModel, out: Path, opts: ConvertOptions) -> ConvertResult:
        tf = require("tensorflow", "converting to TFLite")
        assert src.path is not None
        if opts.quantize:
            return self._quantized(src, out, opts)
        try:
            with quiet():
                converter = tf.lite.TFLiteConverter.from_saved_model(
                    str(src.path), signature_keys=[opts.saved_model_signature])
                flat = converter.convert()
        except Exception as exc:  # noqa: BLE001 - ConverterError lists the ops TFLite lacks
            raise ExportError(f"TFLite conversion failed: {first_line(exc)}",
                              hint="the model may use ops the TFLite builtins lack") from exc
        out.write_bytes(flat)
        return ConvertResult(out, src.signature, tool=self.tool, tool_version=tf.__version__, layout=src.layout)

    def _quantized(self, src: SourceModel, out: Path, opts: ConvertOptions) -> ConvertResult:
        from fwx.quantize.tflite import convert_quantized

        assert src.path is not None
        with quiet():
            info = convert_quantized(src.path, out, src.signature, opts)
        return ConvertResult(out, src.signature, tool=info.tool, tool_version=info.tool_version, layout=src.layout,
                             precision=info.precision,
                             extra={"quantization": info.to_json(), "warnings": list(info.warnings)})
