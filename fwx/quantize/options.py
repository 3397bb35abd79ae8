"""The quantisation flags as one typed, frozen value, checked before any heavy work.

``fwx export`` builds a ``QuantOptions`` once from ``--quantize`` and its flags
(``quant_options``) and stores it in ``ConvertOptions.quant`` (None: no
quantisation). Building it refuses an unknown kind, method or I/O dtype;
``check_options`` then turns every other mistake a user can make (data that
does not fit the model, a format that cannot hold it) into a one-line
``UsageError`` or ``InputError`` before a model is loaded, so nothing
half-done is published.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from fwx.errors import InputError, UsageError
from fwx.formats import Format
from fwx.signature import Signature

if TYPE_CHECKING:
    from fwx.quantize.budget import Budget

KINDS = ("int8", "int8-dynamic", "fp16")
METHODS = ("minmax", "entropy", "percentile")
IO_DTYPES = ("int8", "uint8", "float32")
#: Formats that can hold a quantised model.
QUANTIZABLE: tuple[Format, ...] = (Format.ONNX, Format.TFLITE)
DEFAULT_SAMPLES = 200
DEFAULT_METHOD = "minmax"
DEFAULT_IO_DTYPE = "int8"  # TFLite full-integer: integer end to end
MIN_INT8_OPSET = 10  # QuantizeLinear/DequantizeLinear
MIN_PER_CHANNEL_OPSET = 13  # the axis attribute of QuantizeLinear/DequantizeLinear
RANDOM = "random"
RANDOM_WARNING = (
    "calibrating with RANDOM data: int8 scales will not match real inputs and accuracy can "
    "collapse; pass --calibration-data with real samples"
)


@dataclass(frozen=True)
class QuantOptions:
    """What to quantise to and how; the flag a field came from is named in its comment.

    ``None`` means "not given": the default applies, and a flag that does not
    apply to a target is warned about only when it was given.
    """

    kind: str  # --quantize: int8 | int8-dynamic | fp16
    calibration_data: str | None = None  # --calibration-data: .npz, folder, or "random"
    method: str | None = None  # --calibration-method (ONNX); None: minmax
    samples: int = DEFAULT_SAMPLES  # --calibration-samples
    per_channel: bool | None = None  # --per-channel/--per-tensor; None: per-channel where the format/opset allows
    io_dtype: str | None = None  # --io-dtype (TFLite int8); None: int8
    strict: bool = False  # --strict-int8 (TFLite)
    eval_data: str | None = None  # --eval-data: labelled samples to measure the cost on
    preprocess: str | Mapping[str, Any] | None = None  # --preprocess, for image folders
    max_drop: float | None = None  # --max-drop: top-1 points INT8 may lose on labelled --eval-data
    min_cosine: float | None = None  # --min-cosine: mean output cosine vs the float model
    min_agreement: float | None = None  # --min-agreement: top-1 agreement with the float model (0..1)
    budget_steps: int | None = None  # --budget-steps: layers tried in float at most; None: 8
    eval_holdout: float | None = None  # --eval-holdout: fraction of the budget's samples held out; None: 0.5
    weight_bits: int | None = None  # --weight-bits (ONNX int8): 7 or 8; None: 7, the same numbers on every CPU

    def __post_init__(self) -> None:
        kind = str(self.kind or "").strip().lower()
        if kind not in KINDS:
            raise UsageError(f"unknown --quantize {self.kind!r}", hint=f"use one of: {', '.join(KINDS)}")
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "method", _choice(self.method, METHODS, "--calibration-method"))
        object.__setattr__(self, "io_dtype", _choice(self.io_dtype, IO_DTYPES, "--io-dtype"))
        object.__setattr__(self, "calibration_data", _opt_str(self.calibration_data))
        object.__setattr__(self, "eval_data", _opt_str(self.eval_data))
        if self.weight_bits not in (None, 7, 8):
            raise UsageError(f"--weight-bits must be 7 or 8, got {self.weight_bits!r}")
        if isinstance(self.samples, bool) or not isinstance(self.samples, int) or self.samples < 1:
            raise UsageError(f"--calibration-samples must be a positive integer, got {self.samples!r}")
        if self.eval_holdout is not None:
            from fwx.quantize.split import check_fraction

            check_fraction(self.eval_holdout)
        self.budget  # noqa: B018 - builds (and so checks) the budget's bounds now, not mid-export

    @property
    def budget(self) -> Budget:
        """The accuracy budget (``fwx.quantize.budget``); ``.active`` is False when no bound was given."""
        from fwx.quantize.budget import DEFAULT_MAX_STEPS, Budget

        steps = DEFAULT_MAX_STEPS if self.budget_steps is None else self.budget_steps
        return Budget(self.max_drop, self.min_cosine, self.min_agreement, max_steps=steps)

    @property
    def holdout_fraction(self) -> float:
        """The part of the budget's samples its search never sees (``fwx.quantize.split``)."""
        from fwx.quantize.split import HOLDOUT_FRACTION

        return HOLDOUT_FRACTION if self.eval_holdout is None else self.eval_holdout

    @property
    def is_random(self) -> bool:
        return self.calibration_data is not None and self.calibration_data.strip().lower() == RANDOM

    @property
    def static(self) -> bool:
        """Full-integer int8: the kind that calibrates activation ranges."""
        return self.kind == "int8"

    @property
    def calibration_method(self) -> str:
        return self.method or DEFAULT_METHOD

    @property
    def onnx_weight_bits(self) -> int:
        """ONNX int8 weights: 7 bits unless 8 were asked for (``fwx.quantize.cpu`` says why)."""
        from fwx.quantize.cpu import REDUCED_WEIGHT_BITS

        return self.weight_bits or REDUCED_WEIGHT_BITS

    @property
    def tflite_io_dtype(self) -> str:
        return self.io_dtype or DEFAULT_IO_DTYPE

    def to_json(self) -> dict[str, Any]:
        """Plain data (it crosses to the prefetch process and back unchanged through ``from_json``)."""
        data = asdict(self)
        if isinstance(self.preprocess, Mapping):
            data["preprocess"] = dict(self.preprocess)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QuantOptions:
        return cls(**dict(data))


def quant_options(kind: str | None, **flags: Any) -> QuantOptions | None:
    """The options ``--quantize KIND`` and its flags ask for; None without ``--quantize``.

    ``flags`` are ``QuantOptions``' other fields, None (or False) when not
    given. A flag given without ``--quantize`` would be silently ignored, so it
    is refused.
    """
    given = {k: v for k, v in flags.items() if v is not None}
    if kind is None or str(kind).strip() == "":
        stray = [k for k, v in given.items() if v is not False]
        if stray:
            flag = _FLAGS.get(stray[0], f"--{stray[0].replace('_', '-')}")
            raise UsageError(f"{flag} needs --quantize", hint="add --quantize int8 (or int8-dynamic, fp16)")
        return None
    return QuantOptions(kind, **given)


#: The command-line flag of each field, for messages.
_FLAGS = {
    "calibration_data": "--calibration-data",
    "method": "--calibration-method",
    "samples": "--calibration-samples",
    "per_channel": "--per-channel/--per-tensor",
    "io_dtype": "--io-dtype",
    "strict": "--strict-int8",
    "eval_data": "--eval-data",
    "preprocess": "--preprocess",
    "max_drop": "--max-drop",
    "min_cosine": "--min-cosine",
    "min_agreement": "--min-agreement",
    "budget_steps": "--budget-steps",
    "eval_holdout": "--eval-holdout",
    "weight_bits": "--weight-bits",
}


def _choice(value: str | None, allowed: tuple[str, ...], flag: str) -> str | None:
    if value is None:
        return None
    text = str(value).strip().lower()
    if text not in allowed:
        raise UsageError(f"unknown {flag} {value!r}", hint=f"use one of: {', '.join(allowed)}")
    return text


def _opt_str(value: Any) -> str | None:
    return None if value is None or str(value) == "" else str(value)


def check_options(
    target: Format, quant: QuantOptions | None, signature: Signature | None = None, *, opset: int | None = None
) -> list[str]:
    """Refuse impossible quantisation requests; return (and print) the warnings.

    Called by the export pipeline before any heavy work. With ``signature`` the
    calibration and eval data are also checked against the model's inputs
    (names, shapes, dtypes); without it only that they exist and can be read.
    ``opset`` is the ``--opset`` asked for (ONNX), if any.
    """
    from fwx import ui

    if quant is None:
        return []
    check_target(target, quant.kind)
    warnings = _opset_warnings(target, quant, opset) + _flag_warnings(target, quant)
    warnings += check_data(quant, signature)
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


def _opset_warnings(target: Format, q: QuantOptions, opset: int | None) -> list[str]:
    if target is not Format.ONNX or q.kind == "fp16" or opset is None:
        return []
    if opset < MIN_INT8_OPSET:
        raise UsageError(
            f"--quantize {q.kind} needs ONNX opset >= {MIN_INT8_OPSET} (QuantizeLinear), got --opset {opset}",
            hint=f"export with --opset {MIN_PER_CHANNEL_OPSET} or higher",
        )
    if opset < MIN_PER_CHANNEL_OPSET and q.static and q.per_channel is not False:
        return [per_tensor_warning(opset)]
    return []


def per_tensor_warning(opset: int) -> str:
    return (
        f"ONNX opset {opset} has no per-channel QuantizeLinear: weights are quantised per-tensor, which usually "
        f"costs accuracy; use --opset {MIN_PER_CHANNEL_OPSET} or higher for per-channel"
    )


def _flag_warnings(target: Format, q: QuantOptions) -> list[str]:
    out: list[str] = []
    if q.static and not q.calibration_data:
        raise UsageError(
            "--quantize int8 needs calibration data",
            hint="pass --calibration-data PATH (.npz keyed by input name, a folder of .npy files or "
            "images); --calibration-data random works but is not recommended",
        )
    if not q.static and q.calibration_data:
        out.append(f"--calibration-data is ignored with --quantize {q.kind} (only int8 calibrates)")
    if q.is_random and q.static:
        out.append(RANDOM_WARNING)
    if target is Format.TFLITE and q.calibration_method != DEFAULT_METHOD:
        out.append(f"TFLite calibrates with min/max ranges; --calibration-method {q.method} applies to ONNX only")
    if target is Format.ONNX and q.io_dtype not in (None, "float32"):
        out.append("ONNX QDQ models keep float32 inputs and outputs; --io-dtype applies to TFLite only")
    if target is Format.TFLITE and q.weight_bits == 7:
        out.append(
            "--weight-bits 7 applies to ONNX only: TFLite int8 weights are 8-bit (LiteRT's kernels do not saturate)"
        )
    if target is Format.ONNX and q.weight_bits == 8 and q.kind != "fp16":
        out.append(
            "--weight-bits 8: onnxruntime's int8 kernels can saturate on x86-64 CPUs without VNNI (AVX2-only), "
            "so this model may compute different numbers there; fwx validate and fwx serve warn on such CPUs"
        )
    if target is Format.ONNX and q.strict:
        out.append("--strict-int8 applies to TFLite only (ONNX QDQ leaves ops it cannot quantise in float)")
    _check_budget(q)
    return out


def _check_budget(q: QuantOptions) -> None:
    """A budget keeps int8 layers in float, measured on real samples: refuse what cannot be measured."""
    budget = q.budget
    if not budget.active:
        if q.eval_holdout is not None:
            raise UsageError(
                "--eval-holdout splits the samples a budget is measured on, but no budget was given",
                hint="add --max-drop, --min-cosine or --min-agreement, or drop --eval-holdout",
            )
        return
    if not q.static:
        raise UsageError(
            f"the budget ({budget.describe()}) needs --quantize int8",
            hint="it keeps the layers int8 hurts most in float; int8-dynamic and fp16 have no such layers",
        )
    if budget.needs_labels and not q.eval_data:
        raise UsageError(
            "--max-drop needs labelled --eval-data", hint="pass --eval-data FILE.npz with a 'labels' array"
        )
    if not q.eval_data and q.is_random:
        raise UsageError(
            f"the budget ({budget.describe()}) cannot be measured on random calibration data",
            hint="pass --eval-data (or real --calibration-data) to measure it on",
        )


def check_data(q: QuantOptions, signature: Signature | None) -> list[str]:
    """Open the calibration/eval data and check it against ``signature``; return warnings."""
    from fwx.quantize.data import open_source

    warnings: list[str] = []
    if q.static and q.calibration_data and not q.is_random:
        src = open_source(q.calibration_data, signature, q.preprocess, purpose="calibration")
        src.check(signature, q.samples)
        if src.count < q.samples and q.samples != DEFAULT_SAMPLES:
            warnings.append(f"--calibration-samples {q.samples} asked, but {src.describe()} has only {src.count}")
    if q.eval_data:
        if q.eval_data.strip().lower() == RANDOM:
            raise InputError("--eval-data cannot be random", hint="pass real samples (an .npz with a 'labels' array)")
        ev = open_source(q.eval_data, signature, q.preprocess, purpose="eval")
        ev.check(signature, ev.count)
        if q.budget.needs_labels and ev.labels() is None:
            raise InputError(
                f"--max-drop counts top-1 points, but {ev.describe()} has no labels",
                hint="add a 'labels' array (one class per sample), or budget on --min-cosine/--min-agreement",
            )
    return warnings


def validation_examples(quant: QuantOptions | None, signature: Signature, n: int = 16) -> dict[str, Any] | None:
    """Up to ``n`` real samples (eval data first, else calibration data) to validate a quantised export on.

    An int8 model calibrated on real data is judged on the wrong question when
    the validator feeds it standard-normal noise: activations fall outside the
    calibrated ranges and saturate. Returns None when there is no real data.
    """
    import numpy as np

    from fwx.quantize.data import open_source
    from fwx.quantize.stream import BatchStream, batch_size_for

    if quant is None:
        return None
    spec = quant.eval_data or (quant.calibration_data if quant.static and not quant.is_random else None)
    if not spec:
        return None
    src = open_source(spec, signature, quant.preprocess, purpose="eval" if quant.eval_data else "calibration")
    src.check(signature, n)
    batch = next(iter(BatchStream(src, signature, n, batch_size_for(signature, n))), None)
    return {k: np.asarray(v) for k, v in batch.items()} if batch else None
