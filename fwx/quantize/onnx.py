"""ONNX quantisation: a post-processing step on the float32 ``model.onnx``.

* ``int8``: static QDQ with ``onnxruntime.quantization.quantize_static``, fed by
  a streaming reader; per-channel weights where the opset has the ``axis``
  attribute (>= 13), per-tensor with a warning at opset 10-12, refused below 10.
  Calibration runs stride-wise (``CalibStridedMinMax``): ORT keeps every
  intermediate output of the samples it has seen until ``collect_data`` ends,
  so one stride of at most 64 samples is collected, reduced and dropped at a
  time and peak memory stops growing with the number of samples.
  (``CalibMaxIntermediateOutputs`` is not used: in ORT 1.31 it discards the
  collected outputs without merging them.)
  Weights are 7-bit (``reduce_range``) unless ``--weight-bits 8``: with 8,
  onnxruntime's kernels saturate on x86-64 CPUs without VNNI and the model
  computes different numbers there than where it was validated (``cpu.py``).
* ``int8-dynamic``: ``quantize_dynamic`` (int8 weights, 7-bit likewise; activations quantised at run time).
* ``fp16``: ``onnxruntime.transformers.float16`` with float32 inputs/outputs
  (Casts at the boundaries), so callers do not change.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fwx.errors import ExportError, FwxError, SignatureMismatchError, UsageError, first_line
from fwx.formats import Format
from fwx.frameworks import require
from fwx.manifest import size_of
from fwx.quantize.cpu import REDUCED_WEIGHT_BITS
from fwx.quantize.data import Source, open_source
from fwx.quantize.info import QuantInfo
from fwx.quantize.options import (
    MIN_INT8_OPSET,
    MIN_PER_CHANNEL_OPSET,
    RANDOM_WARNING,
    QuantOptions,
    per_tensor_warning,
)
from fwx.quantize.stream import BatchStream, batch_size_for, stride_for, uniform_batches
from fwx.quiet import quiet
from fwx.runtimes.files import load_onnx, onnx_opset
from fwx.signature import Signature

_METHODS = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}


def _model_facts(onnx: Any, path: Path, signature: Signature) -> int:
    """The model's ai.onnx opset; also checks that its inputs are the pinned ones."""
    model = load_onnx(path)
    opset = onnx_opset(model) or 0
    inits = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    if sorted(names) != sorted(signature.input_names):
        raise SignatureMismatchError(
            f"{path.name} takes inputs {names}, the pinned signature {signature.input_names}",
            hint="re-export the float ONNX model with the pinned input names",
        )
    return int(opset)


def quantize_onnx(
    fp32_path: Path, out_path: Path, signature: Signature, s: QuantOptions, graph: str | None = None
) -> QuantInfo:
    """Write the quantised ``out_path`` from ``fp32_path``; measure it on --eval-data if given.

    ``graph`` names what wrote the float model (the exporter hop's tool); without it, the
    ONNX file's own producer. A budget records it: two exporters' graphs of one model
    quantise differently, and a budget met on one says nothing of the other.
    """
    onnx, ort = require("onnx", "quantising ONNX models"), require("onnxruntime", "quantising ONNX models")
    fp32_path, out_path = Path(fp32_path), Path(out_path)
    opset = _model_facts(onnx, fp32_path, signature)
    info = QuantInfo(
        kind=s.kind,
        format=Format.ONNX.value,
        opset=opset,
        size_before=size_of(fp32_path),
        tool=f"onnxruntime.{'transformers.float16' if s.kind == 'fp16' else 'quantization'}",
        tool_version=ort.__version__,
    )
    evaluation = _eval_source(s, signature)
    t0 = time.perf_counter()
    if s.kind != "fp16":
        from fwx.quantize.cpu import features

        info.weight_bits, info.cpu = s.onnx_weight_bits, features().to_json()
    if s.kind == "int8":
        _static_budgeted(s, fp32_path, out_path, signature, info, graph or _producer(fp32_path))
    elif s.kind == "int8-dynamic":
        _dynamic(fp32_path, out_path, info, reduce_range=s.onnx_weight_bits == REDUCED_WEIGHT_BITS)
    else:
        _fp16(onnx, fp32_path, out_path, info)
    info.calibration_seconds = round(time.perf_counter() - t0, 3)
    info.size_after = size_of(out_path)
    if evaluation is not None:
        from fwx.quantize.evaluate import evaluate_artifacts

        info.eval = evaluate_artifacts(Format.ONNX, fp32_path, out_path, evaluation, signature)
        from fwx.quantize.report import accuracy_warning

        if (w := accuracy_warning(info)) is not None:
            info.warn(w)
    return info


def _eval_source(s: QuantOptions, signature: Signature) -> Source | None:
    """The eval data; with a budget, only the part its search never saw (``budget_fit.eval_part``)."""
    if not s.eval_data:
        return None
    from fwx.quantize.budget_fit import eval_part

    src = open_source(s.eval_data, signature, s.preprocess, purpose="eval")
    src.check(signature, src.count)
    return eval_part(s, src)


def _producer(path: Path) -> str:
    """The ONNX file's producer (e.g. ``pytorch 2.13.0``, ``tf2onnx 1.16.1``)."""
    model = load_onnx(path)
    return f"{model.producer_name} {model.producer_version}".strip() or "unknown producer"


def _granularity(s: QuantOptions, opset: int, info: QuantInfo) -> bool:
    if opset < MIN_INT8_OPSET:
        raise UsageError(
            f"--quantize {s.kind} needs ONNX opset >= {MIN_INT8_OPSET} (QuantizeLinear), the model has {opset}",
            hint=f"export with --opset {MIN_PER_CHANNEL_OPSET} or higher",
        )
    per_channel = s.per_channel is not False and opset >= MIN_PER_CHANNEL_OPSET
    if s.per_channel is not False and opset < MIN_PER_CHANNEL_OPSET:
        info.warn(per_tensor_warning(opset))
    info.granularity = "per-channel" if per_channel else "per-tensor"
    return per_channel


def _static_budgeted(s: QuantOptions, fp32: Path, out: Path, signature: Signature, info: QuantInfo, graph: str) -> None:
    """Static int8; with a budget (--max-drop ...), layers stay in float until it holds (``budget_fit``)."""
    with tempfile.TemporaryDirectory(prefix="fwx-quant-") as tmp:
        model_in = _pre_process(fp32, Path(tmp) / "pre.onnx", info)
        _static(s, model_in, out, signature, info)
        if s.budget.active:
            from fwx.quantize.budget_fit import fit_onnx, holdout_warning

            info.budget = fit_onnx(
                s,
                fp32,
                model_in,
                out,
                signature,
                lambda names, dest: _static(s, model_in, dest, signature, info, names),
                graph,
            )
            if (w := holdout_warning(s.budget, info.budget)) is not None:
                info.warn(w)


def _static(
    s: QuantOptions, model_in: Path, out: Path, signature: Signature, info: QuantInfo, exclude: Sequence[str] = ()
) -> None:
    """``quantize_static`` on the pre-processed ``model_in``; the nodes named in ``exclude`` stay in float."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    assert info.opset is not None
    per_channel = _granularity(s, info.opset, info)
    source = open_source(s.calibration_data or "random", signature, s.preprocess, random_count=s.samples)
    source.check(signature, s.samples)
    if s.is_random:
        info.warn(RANDOM_WARNING)
    n, bs = uniform_batches(min(s.samples, source.count), batch_size_for(signature))
    stream = BatchStream(source, signature, n, bs)
    info.method, info.samples = s.calibration_method, stream.n
    info.calibration_data = source.describe()
    extra = {"CalibStridedMinMax": stride_for(len(stream), bs)}
    _run(
        lambda: quantize_static(
            str(model_in),
            str(out),
            stream,
            quant_format=QuantFormat.QDQ,
            per_channel=per_channel,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            reduce_range=s.onnx_weight_bits == REDUCED_WEIGHT_BITS,
            calibrate_method=getattr(CalibrationMethod, _METHODS[s.calibration_method]),
            nodes_to_exclude=list(exclude),
            extra_options=extra,
        ),
        "int8",
    )


def _pre_process(fp32: Path, dest: Path, info: QuantInfo) -> Path:
    """Shape inference + graph cleanup before calibration (ORT's recommended first step)."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    try:
        with quiet(native=True):
            quant_pre_process(str(fp32), str(dest))
        return dest
    except Exception as exc:  # noqa: BLE001 - best effort: quantising the raw model still works
        info.warn(f"ONNX pre-processing (shape inference) skipped: {first_line(exc, 200)}")
        return fp32


def _dynamic(fp32: Path, out: Path, info: QuantInfo, *, reduce_range: bool) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    assert info.opset is not None
    if info.opset < MIN_INT8_OPSET:
        raise UsageError(
            f"--quantize int8-dynamic needs ONNX opset >= {MIN_INT8_OPSET}, the model has {info.opset}",
            hint=f"export with --opset {MIN_PER_CHANNEL_OPSET} or higher",
        )
    info.granularity = "per-tensor"
    with tempfile.TemporaryDirectory(prefix="fwx-quant-") as tmp:
        model_in = _pre_process(fp32, Path(tmp) / "pre.onnx", info)
        _run(
            lambda: quantize_dynamic(str(model_in), str(out), weight_type=QuantType.QInt8, reduce_range=reduce_range),
            "int8-dynamic",
        )


def _fp16(onnx: Any, fp32: Path, out: Path, info: QuantInfo) -> None:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    def convert() -> None:
        model = onnx.load(str(fp32))
        onnx.save(convert_float_to_float16(model, keep_io_types=True), str(out))

    _run(convert, "fp16")


def _run(fn: Any, kind: str) -> None:
    """Run a quantiser quietly; any failure is one ``ExportError`` line."""
    try:
        with quiet(native=True):
            fn()
    except FwxError:
        raise
    except Exception as exc:  # noqa: BLE001 - ORT raises anything from deep inside
        raise ExportError(
            f"ONNX {kind} quantisation failed: {first_line(exc)}",
            hint="rerun with --debug for the full log; --quantize int8-dynamic or fp16 may still work",
        ) from exc
