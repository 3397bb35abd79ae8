"""TFLite quantisation, inside the SavedModel -> TFLite conversion.

* ``int8``: full-integer post-training quantisation. The representative dataset
  is a generator over the calibration data (one sample at a time, never all of
  it in memory); ``inference_input_type``/``inference_output_type`` are set from
  ``--io-dtype`` (default int8) so the model is integer end to end.
  ``--strict-int8`` sets ``supported_ops=[TFLITE_BUILTINS_INT8]`` *and* checks
  the written model: with TF 2.21's quantiser an op with no integer kernel
  (e.g. SIN) is silently kept in float even in that mode, so fwx reads the op
  and tensor types back and refuses the model if any op still computes in float.
  Without the flag those ops are listed in the receipt (``float_ops``).
* ``int8-dynamic``: dynamic-range (int8 weights, float activations).
* ``fp16``: float16 weights.

The float32 TFLite model is converted too (in a temporary folder): it gives the
"size before" and is the reference the accuracy cost is measured against.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fwx.errors import ExportError, FwxError, UnsupportedOpsError, first_line
from fwx.formats import Format
from fwx.frameworks import require
from fwx.quantize.cpu import FULL_WEIGHT_BITS, features
from fwx.quantize.data import Source, open_source
from fwx.quantize.info import QuantInfo
from fwx.quantize.options import RANDOM_WARNING, QuantOptions
from fwx.quantize.stream import BatchStream
from fwx.quiet import quiet
from fwx.signature import Signature

#: Ops that only move data between float and integer at the model's edges.
_BOUNDARY_OPS = frozenset({"QUANTIZE", "DEQUANTIZE"})
_FLOAT = (np.float32, np.float16, np.float64)


def convert_quantized(
    saved_model_dir: Path, out_path: Path, signature: Signature, s: QuantOptions, key: str = "serving_default"
) -> QuantInfo:
    """Convert signature ``key`` of ``saved_model_dir`` to a quantised ``out_path``; measure it on --eval-data."""
    require("ai_edge_litert", "quantising TFLite models")  # reads the written model back
    tf = require("tensorflow", "quantising TFLite models")
    calib = _calibration_source(s, signature)
    evaluation = _eval_source(s, signature)
    info = QuantInfo(
        kind=s.kind, format=Format.TFLITE.value, tool="tf.lite.TFLiteConverter", tool_version=tf.__version__
    )
    with tempfile.TemporaryDirectory(prefix="fwx-tflite-") as tmp:
        float_path = Path(tmp) / "float32.tflite"
        float_path.write_bytes(_convert(_converter(tf, saved_model_dir, key), "float32"))
        info.size_before = float_path.stat().st_size
        conv = _converter(tf, saved_model_dir, key)
        _configure(tf, conv, s, calib, signature, info)
        t0 = time.perf_counter()
        Path(out_path).write_bytes(_convert(conv, s.kind))
        info.calibration_seconds = round(time.perf_counter() - t0, 3)
        if s.static and s.budget.active:
            _budget(tf, saved_model_dir, key, s, calib, signature, info, float_path, Path(out_path))
        info.size_after = Path(out_path).stat().st_size
        inspect_model(Path(out_path), key, info)
        if s.kind == "int8" and s.strict and info.float_ops:
            Path(out_path).unlink()
            raise UnsupportedOpsError(
                "TFLite full-integer (--strict-int8)",
                info.float_ops,
                hint="these ops have no int8 kernel; drop --strict-int8 to keep them in float",
            )
        if evaluation is not None:
            from fwx.quantize.evaluate import evaluate_artifacts
            from fwx.quantize.report import accuracy_warning

            info.eval = evaluate_artifacts(Format.TFLITE, float_path, Path(out_path), evaluation, signature)
            if (w := accuracy_warning(info)) is not None:
                info.warn(w)
    return info


def _budget(
    tf: Any,
    saved_model_dir: Path,
    key: str,
    s: QuantOptions,
    calib: Source | None,
    signature: Signature,
    info: QuantInfo,
    float_path: Path,
    out: Path,
) -> None:
    """--max-drop and co.: calibrate once (calibrate-only), then quantise again with ops denylisted (budget_fit)."""
    from fwx.quantize.budget_fit import fit_tflite, holdout_warning
    from fwx.quantize.sensitivity import TFLiteRequantizer

    conv = _converter(tf, saved_model_dir, key)
    _configure(tf, conv, s, calib, signature, info)
    conv._experimental_calibrate_only = True
    calibrated = _convert(conv, "int8 calibration")
    requantizer = TFLiteRequantizer(calibrated, per_channel=s.per_channel is not False, io_dtype=s.tflite_io_dtype)
    graph = f"tf.lite.TFLiteConverter {tf.__version__} (SavedModel signature {key})"
    info.budget = fit_tflite(s, float_path, requantizer, out, signature, graph)
    if (w := holdout_warning(s.budget, info.budget)) is not None:
        info.warn(w)


def _eval_source(s: QuantOptions, signature: Signature) -> Source | None:
    """The eval data; with a budget, only the part its search never saw (``budget_fit.eval_part``)."""
    if not s.eval_data:
        return None
    from fwx.quantize.budget_fit import eval_part

    return eval_part(s, _checked(open_source(s.eval_data, signature, s.preprocess, purpose="eval"), signature))


def _checked(src: Source, signature: Signature, n: int | None = None) -> Source:
    src.check(signature, src.count if n is None else n)
    return src


def _calibration_source(s: QuantOptions, signature: Signature) -> Source | None:
    if not s.static:
        return None
    src = open_source(s.calibration_data or "random", signature, s.preprocess, random_count=s.samples)
    return _checked(src, signature, s.samples)


def _converter(tf: Any, saved_model_dir: Path, key: str) -> Any:
    try:
        with quiet(native=True):
            return tf.lite.TFLiteConverter.from_saved_model(str(saved_model_dir), signature_keys=[key])
    except Exception as exc:  # noqa: BLE001 - TF raises many types for a bad SavedModel
        raise ExportError(
            f"cannot open SavedModel {saved_model_dir} (signature {key!r}) for TFLite: {first_line(exc, 200)}"
        ) from exc


def _configure(
    tf: Any, conv: Any, s: QuantOptions, calib: Source | None, signature: Signature, info: QuantInfo
) -> None:
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    if s.kind == "fp16":
        conv.target_spec.supported_types = [tf.float16]
        return
    info.granularity = "per-channel" if s.per_channel is not False else "per-tensor"
    info.weight_bits, info.cpu = FULL_WEIGHT_BITS, features().to_json()
    if s.per_channel is False:
        conv._experimental_disable_per_channel = True
    if s.kind == "int8-dynamic":
        return
    assert calib is not None
    stream = BatchStream(calib, signature, s.samples, 1)
    info.method, info.samples, info.calibration_data = "minmax", stream.n, calib.describe()
    if s.is_random:
        info.warn(RANDOM_WARNING)

    def representative() -> Iterator[dict[str, np.ndarray]]:
        yield from stream

    conv.representative_dataset = representative
    ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.target_spec.supported_ops = ops if s.strict else [*ops, tf.lite.OpsSet.TFLITE_BUILTINS]
    io = {"int8": tf.int8, "uint8": tf.uint8, "float32": tf.float32}[s.tflite_io_dtype]
    conv.inference_input_type = io
    conv.inference_output_type = io
    info.io_dtype = s.tflite_io_dtype


def _convert(conv: Any, kind: str) -> bytes:
    try:
        with quiet(native=True) as log:
            data: bytes = conv.convert()
        return data
    except FwxError:
        raise
    except Exception as exc:  # noqa: BLE001 - ConverterError and friends
        text = f"{exc}\n{log.getvalue()}"
        ops = sorted(set(re.findall(r"'tfl?\.(\w+)' op", text)))
        if ops and "INT8" in text.upper():
            raise UnsupportedOpsError(
                "TFLite full-integer", ops, hint="drop --strict-int8 to keep these ops in float"
            ) from exc
        raise ExportError(
            f"TFLite {kind} conversion failed: {first_line(exc)}", hint="rerun with --debug for the full log"
        ) from exc


def inspect_model(path: Path, key: str, info: QuantInfo) -> None:
    """Fill ``info.float_ops`` (full int8 only) and ``info.io`` from the written model itself."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(path))
    if info.kind == "int8":
        tensors = {t["index"]: t for t in interp.get_tensor_details()}
        float_ops: Counter[str] = Counter()
        for op in interp._get_ops_details():
            if op["op_name"] in _BOUNDARY_OPS:
                continue
            idx = [i for i in (*op["inputs"], *op["outputs"]) if i >= 0 and i in tensors]
            if any(tensors[i]["dtype"] in _FLOAT for i in idx):
                float_ops[op["op_name"]] += 1
        info.float_ops = dict(float_ops)
        _check_scales(interp, tensors)
    sigs = interp.get_signature_list()
    if key in sigs:
        runner = interp.get_signature_runner(key)
        details = {**runner.get_input_details(), **runner.get_output_details()}
    else:
        details = {d["name"]: d for d in (*interp.get_input_details(), *interp.get_output_details())}
    info.io = {name: _io_entry(d) for name, d in details.items()}


#: An int8 scale this wide spans more than +-1e12: no real activation; a constant has swamped the range.
_MAX_SCALE = 1e10


def _check_scales(interp: Any, tensors: dict[int, dict[str, Any]]) -> None:
    """Refuse a model whose int8 ranges a huge constant swamped, naming the op, before LiteRT is asked to run it.

    The converter folds a constant operand into its op's activation range (a
    PADV2 pads with the dtype's lowest value and keeps its input's scale): every
    value then rounds to zero, and LiteRT's XNNPACK delegate fails to prepare the
    graph or aborts the process.
    """
    for op in interp._get_ops_details():
        for i in op["outputs"]:
            t = tensors.get(i)
            scale = float(np.max(t["quantization_parameters"]["scales"], initial=0.0)) if t else 0.0
            if t is not None and t["dtype"] in (np.int8, np.uint8) and not 0 <= scale <= _MAX_SCALE:
                raise ExportError(
                    f"TFLite int8: the range of {t['name']!r} (output of op {op['index']}, {op['op_name']}) is "
                    f"{scale:.1e} per step: a constant in the graph swamped the calibrated range",
                    hint="the converter's output cannot run; export the float model (no --quantize) or "
                    "quantise the ONNX target instead",
                )


def _io_entry(d: dict[str, Any]) -> dict[str, Any]:
    scale, zero_point = d.get("quantization", (0.0, 0))
    entry: dict[str, Any] = {"dtype": np.dtype(d["dtype"]).name}
    if scale:
        entry.update(scale=float(scale), zero_point=int(zero_point))
    return entry
