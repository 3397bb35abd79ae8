"""The quantisation flags, parsed once and checked before any heavy work.

``fwx export`` stores ``--quantize`` in ``ConvertOptions.quantize`` and the rest
in ``ConvertOptions.quant`` (keys: calibration_data, method, samples,
per_channel, io_dtype, strict, eval_data, preprocess). ``check_options`` turns
every mistake a user can make there into a one-line ``UsageError`` or
``InputError`` before a model is loaded, so nothing half-done is published.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from fwx.errors import InputError, UsageError
from fwx.formats import Format
from fwx.signature import Signature

KINDS = ("int8", "int8-dynamic", "fp16")
METHODS = ("minmax", "entropy", "percentile")
IO_DTYPES = ("int8", "uint8", "float32")
#: Formats that can hold a quantised model.
QUANTIZABLE: tuple[Format, ...] = (Format.ONNX, Format.TFLITE)
DEFAULT_SAMPLES = 200
MIN_INT8_OPSET = 10  # QuantizeLinear/DequantizeLinear
MIN_PER_CHANNEL_OPSET = 13  # the axis attribute of QuantizeLinear/DequantizeLinear
RANDOM = "random"
RANDOM_WARNING = (
    "calibrating with RANDOM data: int8 scales will not match real inputs and accuracy can "
    "collapse; pass --calibration-data with real samples"
)


class QuantOptions(Protocol):
    """What quantisation reads from an export's options; ``fwx.converters.ConvertOptions`` has it.

    Declared here so quantize does not import the converters that call it.
    """

    @property
    def quantize(self) -> str | None: ...
    @property
    def quant(self) -> Mapping[str, Any]: ...
    @property
    def opset(self) -> int | None: ...
    @property
    def saved_model_signature(self) -> str: ...


@dataclass(frozen=True)
class QuantSettings:
    """``ConvertOptions.quantize`` + ``.quant``, validated and with defaults filled in."""

    kind: str
    calibration_data: str | None = None
    method: str = "minmax"
    method_given: bool = False
    samples: int = DEFAULT_SAMPLES
    per_channel: bool | None = None  # None = per-channel where the format/opset allows it
    io_dtype: str = "int8"
    io_dtype_given: bool = False
    strict: bool = False
    eval_data: str | None = None
    preprocess: Any = None  # str ("resize=32x32,scale=1/255,...") or dict

    @property
    def is_random(self) -> bool:
        return self.calibration_data is not None and str(self.calibration_data).strip().lower() == RANDOM

    @property
    def static(self) -> bool:
        return self.kind == "int8"

    @classmethod
    def from_options(cls, opts: QuantOptions) -> QuantSettings:
        kind = (opts.quantize or "").strip().lower()
        if kind not in KINDS:
            raise UsageError(f"unknown --quantize {opts.quantize!r}", hint=f"use one of: {', '.join(KINDS)}")
        q = dict(opts.quant or {})
        method = str(q.get("method") or "minmax").strip().lower()
        if method not in METHODS:
            raise UsageError(f"unknown --calibration-method {method!r}", hint=f"use one of: {', '.join(METHODS)}")
        io_dtype = str(q.get("io_dtype") or "int8").strip().lower()
        if io_dtype not in IO_DTYPES:
            raise UsageError(f"unknown --io-dtype {io_dtype!r}", hint=f"use one of: {', '.join(IO_DTYPES)}")
        return cls(
            kind=kind,
            calibration_data=_opt_str(q.get("calibration_data")),
            method=method,
            method_given=q.get("method") is not None,
            samples=_samples(q.get("samples")),
            per_channel=q.get("per_channel"),
            io_dtype=io_dtype,
            io_dtype_given=q.get("io_dtype") is not None,
            strict=bool(q.get("strict", False)),
            eval_data=_opt_str(q.get("eval_data")),
            preprocess=q.get("preprocess"),
        )


def _opt_str(value: Any) -> str | None:
    return None if value is None or str(value) == "" else str(value)


def _samples(value: Any) -> int:
    if value is None:
        return DEFAULT_SAMPLES
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise UsageError(f"--calibration-samples must be a positive integer, got {value!r}")
    return n


def check_options(target: Format, opts: QuantOptions, signature: Signature | None = None) -> list[str]:
    """Refuse impossible quantisation requests; return (and print) the warnings.

    Called by the export pipeline before any heavy work. With ``signature`` the
    calibration and eval data are also checked against the model's inputs
    (names, shapes, dtypes); without it only that they exist and can be read.
    """
    from fwx import ui

    if not opts.quantize:
        for key, flag in (("calibration_data", "--calibration-data"), ("eval_data", "--eval-data")):
            if (opts.quant or {}).get(key):
                raise UsageError(f"{flag} needs --quantize", hint="add --quantize int8 (or int8-dynamic, fp16)")
        return []
    s = QuantSettings.from_options(opts)
    check_target(target, s.kind)
    warnings = _opset_warnings(target, s, opts.opset) + _flag_warnings(target, s)
    warnings += check_data(s, signature)
    for w in warnings:
        ui.warn(w)
    return warnings


def check_target(target: Format, kind: str) -> None:
    """Refuse ``--quantize`` for a format that cannot hold a quantised model, naming those that can."""
    if target not in QUANTIZABLE:
        names = ", ".join(f.value for f in QUANTIZABLE)
        raise UsageError(
            f"--quantize {kind} cannot be applied to {target}: only {names} can hold a quantised model",
            hint=f"export {target} without --quantize, or quantise with --to {names.replace(', ', ',')}",
        )


def _opset_warnings(target: Format, s: QuantSettings, opset: int | None) -> list[str]:
    if target is not Format.ONNX or s.kind == "fp16" or opset is None:
        return []
    if opset < MIN_INT8_OPSET:
        raise UsageError(
            f"--quantize {s.kind} needs ONNX opset >= {MIN_INT8_OPSET} (QuantizeLinear), got --opset {opset}",
            hint=f"export with --opset {MIN_PER_CHANNEL_OPSET} or higher",
        )
    if opset < MIN_PER_CHANNEL_OPSET and s.kind == "int8" and s.per_channel is not False:
        return [per_tensor_warning(opset)]
    return []


def per_tensor_warning(opset: int) -> str:
    return (
        f"ONNX opset {opset} has no per-channel QuantizeLinear: weights are quantised per-tensor, which usually "
        f"costs accuracy; use --opset {MIN_PER_CHANNEL_OPSET} or higher for per-channel"
    )


def _flag_warnings(target: Format, s: QuantSettings) -> list[str]:
    out: list[str] = []
    if s.static and not s.calibration_data:
        raise UsageError(
            "--quantize int8 needs calibration data",
            hint="pass --calibration-data PATH (.npz keyed by input name, a folder of .npy files or "
            "images); --calibration-data random works but is not recommended",
        )
    if not s.static and s.calibration_data:
        out.append(f"--calibration-data is ignored with --quantize {s.kind} (only int8 calibrates)")
    if s.is_random and s.static:
        out.append(RANDOM_WARNING)
    if target is Format.TFLITE and s.method_given and s.method != "minmax":
        out.append(f"TFLite calibrates with min/max ranges; --calibration-method {s.method} applies to ONNX only")
    if target is Format.ONNX and s.io_dtype_given and s.io_dtype != "float32":
        out.append("ONNX QDQ models keep float32 inputs and outputs; --io-dtype applies to TFLite only")
    if target is Format.ONNX and s.strict:
        out.append("--strict-int8 applies to TFLite only (ONNX QDQ leaves ops it cannot quantise in float)")
    return out


def check_data(s: QuantSettings, signature: Signature | None) -> list[str]:
    """Open the calibration/eval data and check it against ``signature``; return warnings."""
    from fwx.quantize.data import open_source

    warnings: list[str] = []
    if s.static and s.calibration_data and not s.is_random:
        src = open_source(s.calibration_data, signature, s.preprocess, purpose="calibration")
        src.check(signature, s.samples)
        if src.count < s.samples and s.samples != DEFAULT_SAMPLES:
            warnings.append(f"--calibration-samples {s.samples} asked, but {src.describe()} has only {src.count}")
    if s.eval_data:
        if str(s.eval_data).strip().lower() == RANDOM:
            raise InputError("--eval-data cannot be random", hint="pass real samples (an .npz with a 'labels' array)")
        ev = open_source(s.eval_data, signature, s.preprocess, purpose="eval")
        ev.check(signature, ev.count)
    return warnings


def validation_examples(opts: QuantOptions, signature: Signature, n: int = 16) -> dict[str, Any] | None:
    """Up to ``n`` real samples (eval data first, else calibration data) to validate a quantised export on.

    An int8 model calibrated on real data is judged on the wrong question when
    the validator feeds it standard-normal noise: activations fall outside the
    calibrated ranges and saturate. Returns None when there is no real data.
    """
    import numpy as np

    from fwx.quantize.data import open_source
    from fwx.quantize.stream import BatchStream, batch_size_for

    if not opts.quantize:
        return None
    s = QuantSettings.from_options(opts)
    spec = s.eval_data or (s.calibration_data if s.static and not s.is_random else None)
    if not spec:
        return None
    src = open_source(spec, signature, s.preprocess, purpose="eval" if s.eval_data else "calibration")
    src.check(signature, n)
    batch = next(iter(BatchStream(src, signature, n, batch_size_for(signature, n))), None)
    return {k: np.asarray(v) for k, v in batch.items()} if batch else None
