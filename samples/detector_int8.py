"""INT8 for the shapes detector under an mAP@0.5 budget, ONNX and TFLite, from fwx's own pieces.

``fwx export --max-drop`` counts top-1 points; a detector is scored by mAP,
so this drives the same search (``fwx.quantize.budget_fit.fit``) with
pycocotools' mAP@0.5 as the measure (``samples.detector.map_scorer``):

* ONNX: ORT's ``quant_pre_process`` then ``quantize_static`` (QDQ, int8
  activations and per-channel weights, min/max), as ``fwx export --quantize
  int8`` does, with ``nodes_to_exclude`` growing; ranked by
  ``qdq_loss_debug``.
* TFLite: the SavedModel fwx exported, calibrated once
  (``_experimental_calibrate_only``), then quantised with the converter's own
  ``mlir_quantize`` step with ``denylisted_nodes`` growing (fwx's
  ``TFLiteRequantizer``); ranked by the ``QuantizationDebugger``. Inputs and
  outputs stay float32 (``--io-dtype float32``): an int8 output would put the
  boxes (0..64 px) and the scores (0..1) back on one int8 scale, which no
  layer kept in float can undo.

Plain INT8 is the same quantiser with nothing excluded, measured first.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fwx.formats import Format
from fwx.quantize.budget import Budget, Layer
from fwx.quantize.budget_fit import RANK_SAMPLES, fit, measurer, rank_batches, tflite_dataset
from fwx.quantize.data import Source, open_source
from fwx.quantize.info import BudgetResult
from fwx.quantize.stream import BatchStream
from fwx.signature import Signature, parse_tensor_spec
from samples.detector import INPUT_NAME, OUTPUT_NAME

SIGNATURE = Signature(
    (parse_tensor_spec(f"{INPUT_NAME}:float32[N,3,64,64]"),), (parse_tensor_spec(f"{OUTPUT_NAME}:float32[N,64,7]"),)
)
METRIC = "mAP@0.5"
Score = Callable[[Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]], float]


def write_data(folder: Path, calibration: np.ndarray, evaluation: np.ndarray) -> tuple[Source, Source]:
    """``calib.npz`` and ``eval.npz`` in ``folder``, opened as fwx's quantisation sources."""
    np.savez(folder / "calib.npz", image=calibration)  # keyed by INPUT_NAME
    np.savez(folder / "eval.npz", image=evaluation)
    return (
        open_source(str(folder / "calib.npz"), SIGNATURE, None),
        open_source(str(folder / "eval.npz"), SIGNATURE, None, purpose="eval"),
    )


def onnx_int8(
    fp32: Path, out: Path, calib: Source, evaluation: Source, score: Score, *, max_drop: float = 0.5, steps: int = 8
) -> BudgetResult:
    """QDQ INT8 of ``fp32`` at ``out`` within ``max_drop`` mAP points (``result.plain``: nothing excluded)."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from fwx.quantize.sensitivity import ONNX_RANKING, onnx_ranking

    with tempfile.TemporaryDirectory(prefix="detector-int8-") as tmp:
        pre = Path(tmp) / "pre.onnx"
        quant_pre_process(str(fp32), str(pre))

        def quantize(names: Sequence[str], dest: Path) -> None:
            quantize_static(
                str(pre),
                str(dest),
                BatchStream(calib, SIGNATURE, calib.count, 10),
                quant_format=QuantFormat.QDQ,
                per_channel=True,
                activation_type=QuantType.QInt8,
                weight_type=QuantType.QInt8,
                nodes_to_exclude=list(names),
            )

        quantize([], out)
        measure, close = measurer(Format.ONNX, fp32, evaluation, SIGNATURE, scorer=score)
        try:
            return fit(
                Budget(max_drop=max_drop, max_steps=steps, metric=METRIC),
                out,
                quantize,
                measure,
                lambda: onnx_ranking(pre, out, rank_batches(calib, SIGNATURE, RANK_SAMPLES)),
                ranked_by=ONNX_RANKING,
                data=evaluation.describe(),
            )
        finally:
            close()


def tflite_int8(
    saved_model: Path,
    float_tflite: Path,
    out: Path,
    calib: Source,
    evaluation: Source,
    score: Score,
    *,
    max_drop: float = 0.5,
    steps: int = 8,
) -> BudgetResult:
    """Full-integer TFLite (float32 I/O) of ``saved_model`` at ``out`` within ``max_drop`` mAP points."""
    from fwx.quantize.sensitivity import TFLITE_RANKING, TFLiteRequantizer, tflite_input_order, tflite_ranking

    requantizer = TFLiteRequantizer(_calibrated(saved_model, calib), per_channel=True, io_dtype="float32")
    requantizer.write([], out)
    measure, close = measurer(Format.TFLITE, float_tflite, evaluation, SIGNATURE, scorer=score)

    def rank() -> list[Layer]:
        order = tflite_input_order(requantizer.quantize(verify=True))
        return tflite_ranking(requantizer, tflite_dataset(calib, SIGNATURE, order, RANK_SAMPLES))

    try:
        budget = Budget(max_drop=max_drop, max_steps=steps, metric=METRIC)
        return fit(budget, out, requantizer.write, measure, rank, ranked_by=TFLITE_RANKING, data=evaluation.describe())
    finally:
        close()


def _calibrated(saved_model: Path, calib: Source) -> bytes:
    """The converter's calibrate-only output: float ops and the ranges min/max recorded on ``calib``."""
    import tensorflow as tf

    conv: Any = tf.lite.TFLiteConverter.from_saved_model(str(saved_model))
    conv.optimizations = [tf.lite.Optimize.DEFAULT]

    def representative() -> Iterator[dict[str, np.ndarray]]:
        yield from BatchStream(calib, SIGNATURE, calib.count, 1)

    conv.representative_dataset = representative
    conv._experimental_calibrate_only = True
    data: bytes = conv.convert()
    return data
