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

**Searched on one half, reported on the other**, as ``fwx export``'s budget
does: the eval images are cut by ``fwx.quantize.split`` (the same seeded
shuffle), the search scores mAP on one half only, and plain INT8 and the
published model are scored again on the half it never saw
(``result.holdout``). mAP on a half is coarse: one ground-truth box of a class
found or missed moves that class's AP by up to 100/n_c points, so the mAP by up
to ``object_worth`` = 100 / (classes x n_c) for the rarest class, and a
detection re-ranked moves it by less. ``Halves.describe`` states it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fwx.formats import Format
from fwx.quantize.budget import Budget, Layer
from fwx.quantize.budget_fit import RANK_SAMPLES, fit, measurer, rank_batches, tflite_dataset
from fwx.quantize.data import Source, open_source
from fwx.quantize.info import BudgetResult
from fwx.quantize.split import Part, Split, parts
from fwx.quantize.stream import BatchStream
from fwx.signature import Signature, parse_tensor_spec
from samples.detector import CLASSES, INPUT_NAME, OUTPUT_NAME, Box, map_scorer

SIGNATURE = Signature(
    (parse_tensor_spec(f"{INPUT_NAME}:float32[N,3,64,64]"),), (parse_tensor_spec(f"{OUTPUT_NAME}:float32[N,64,7]"),)
)
METRIC = "mAP@0.5"
Score = Callable[[Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]], float]


@dataclass(frozen=True)
class Halves:
    """The eval images cut in two: the search scores ``searched``, the cost is reported on ``held``."""

    split: Split
    searched: Part
    held: Part
    search_score: Score  # mAP@0.5 on the searched half
    held_score: Score  # mAP@0.5 on the held-out half
    object_worth: float  # points of mAP one box of the rarest class is worth on the held-out half
    search_worth: float  # the same on the searched half: a layer kept in float must win back more than this

    def describe(self) -> str:
        worth = f"one box on the held-out half <= {self.object_worth:.2f} pt"
        return f"{self.held.base.describe()}: {self.split.describe()}; {worth}"


def object_worth(labels: Sequence[Sequence[Box]]) -> float:
    """The most one ground-truth box can move mAP@0.5 here: 100 / (classes x the rarest class's box count)."""
    counts = [sum(1 for boxes in labels for b in boxes if b[4] == c) for c in range(len(CLASSES))]
    return round(100.0 / (len(CLASSES) * max(1, min(counts))), 4)


def write_data(
    folder: Path, calibration: np.ndarray, evaluation: np.ndarray, labels: Sequence[Sequence[Box]]
) -> tuple[Source, Halves]:
    """``calib.npz`` and ``eval.npz`` in ``folder``, opened as fwx's quantisation sources; eval split in two."""
    np.savez(folder / "calib.npz", image=calibration)  # keyed by INPUT_NAME
    np.savez(folder / "eval.npz", image=evaluation)
    calib = open_source(str(folder / "calib.npz"), SIGNATURE, None)
    s, searched, held = parts(open_source(str(folder / "eval.npz"), SIGNATURE, None, purpose="eval"))

    def scorer(indices: Sequence[int]) -> Score:
        return map_scorer(evaluation[list(indices)], [list(labels[i]) for i in indices])

    worth = object_worth([labels[i] for i in s.holdout])
    search_worth = object_worth([labels[i] for i in s.search])
    return calib, Halves(s, searched, held, scorer(s.search), scorer(s.holdout), worth, search_worth)


def _fit(
    fmt: Format,
    float_path: Path,
    out: Path,
    halves: Halves,
    budget: Budget,
    quantize: Callable[[Sequence[str], Path], None],
    rank: Callable[[], list[Layer]],
    ranked_by: str,
) -> BudgetResult:
    """``fit`` scored on the searched half, plain and published INT8 reported on the held-out half."""
    measure, close = measurer(fmt, float_path, halves.searched, SIGNATURE, scorer=halves.search_score)
    report, close_report = measurer(fmt, float_path, halves.held, SIGNATURE, scorer=halves.held_score)
    try:
        result = fit(budget, out, quantize, measure, rank, ranked_by=ranked_by, data=halves.describe(), report=report)
    finally:
        close()
        close_report()
    worth = {"object_worth_points": halves.object_worth, "search_object_worth_points": halves.search_worth}
    result.split = halves.split.to_json() | worth
    return result


def onnx_int8(
    fp32: Path, out: Path, calib: Source, halves: Halves, *, max_drop: float = 0.5, steps: int = 8
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
                reduce_range=True,  # 7-bit weights, fwx's default: the same numbers on every x86-64 CPU
                nodes_to_exclude=list(names),
            )

        quantize([], out)
        budget = Budget(max_drop=max_drop, max_steps=steps, metric=METRIC, step=halves.search_worth)

        def rank() -> list[Layer]:
            return onnx_ranking(pre, out, rank_batches(calib, SIGNATURE, RANK_SAMPLES))

        return _fit(Format.ONNX, fp32, out, halves, budget, quantize, rank, ONNX_RANKING)


def tflite_int8(
    saved_model: Path,
    float_tflite: Path,
    out: Path,
    calib: Source,
    halves: Halves,
    *,
    max_drop: float = 0.5,
    steps: int = 8,
) -> BudgetResult:
    """Full-integer TFLite (float32 I/O) of ``saved_model`` at ``out`` within ``max_drop`` mAP points."""
    from fwx.quantize.sensitivity import TFLITE_RANKING, TFLiteRequantizer, tflite_input_order, tflite_ranking

    requantizer = TFLiteRequantizer(_calibrated(saved_model, calib), per_channel=True, io_dtype="float32")
    requantizer.write([], out)

    def rank() -> list[Layer]:
        order = tflite_input_order(requantizer.quantize(verify=True))
        return tflite_ranking(requantizer, tflite_dataset(calib, SIGNATURE, order, RANK_SAMPLES))

    budget = Budget(max_drop=max_drop, max_steps=steps, metric=METRIC, step=halves.search_worth)
    return _fit(Format.TFLITE, float_tflite, out, halves, budget, requantizer.write, rank, TFLITE_RANKING)


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
