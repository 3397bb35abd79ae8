"""Calibrated quantisation for ONNX and TFLite, with the accuracy cost measured.

Import-light: ``fwx.quantize.onnx`` and ``fwx.quantize.tflite`` import their
frameworks, this package does not. See docs/quantize.md.
"""

from __future__ import annotations

from fwx.quantize.info import EvalResult, QuantInfo
from fwx.quantize.options import KINDS, METHODS, QUANTIZABLE, QuantOptions, check_options, quant_options

__all__ = [
    "KINDS",
    "METHODS",
    "QUANTIZABLE",
    "EvalResult",
    "QuantInfo",
    "QuantOptions",
    "check_options",
    "quant_options",
]
