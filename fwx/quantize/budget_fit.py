"""The accuracy budget applied to one format: measure plain INT8, rank the layers, search.

Each format brings what ``fwx.quantize.budget.search`` needs: a way to write
the model with some layers in float (ONNX: ``quantize_static`` with
``nodes_to_exclude``; TFLite: the calibrated model quantised again with
``denylisted_nodes``, no second calibration) and the runtime that scores it
against the float model, the same ``fwx.runtimes`` the validators and the
server use.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fwx.errors import InputError
from fwx.formats import Format
from fwx.quantize.budget import Budget, Layer, Measure, Measurer, Quantizer, measure_with, search
from fwx.quantize.data import Source, open_source
from fwx.quantize.evaluate import evaluate, runtime_runner
from fwx.quantize.info import BudgetResult
from fwx.quantize.options import QuantOptions
from fwx.quantize.stream import BatchStream, batch_size_for
from fwx.signature import Signature

if TYPE_CHECKING:
    from fwx.quantize.sensitivity import TFLiteRequantizer

#: How many layers (in SQNR order) are each measured alone in float before the search.
PROBE_LIMIT = 24
#: Calibration samples the rankings run on (every activation of each is held in memory).
RANK_SAMPLES = 32
#: A caller's own score (e.g. mAP) of one model, in points: higher is better. Gets the model's runner.
Scorer = Callable[[Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]], float]


def budget_source(
    eval_data: str | None, calibration: Source | None, signature: Signature, budget: Budget, preprocess: object
) -> Source:
    """The samples a budget is measured on: --eval-data, else (cosine/agreement only) the calibration data."""
    if eval_data:
        src = open_source(eval_data, signature, preprocess, purpose="eval")  # type: ignore[arg-type]
        src.check(signature, src.count)
    elif calibration is not None and not budget.needs_labels:
        src = calibration
    else:
        raise InputError(
            f"the budget {budget.describe()} needs labelled --eval-data",
            hint="pass --eval-data FILE.npz with a 'labels' array, or budget on --min-cosine/--min-agreement",
        )
    if budget.needs_labels and src.labels() is None:
        raise InputError(
            f"--max-drop counts top-1 points, but {src.describe()} has no labels",
            hint="add a 'labels' array (one class per sample), or use --min-cosine/--min-agreement",
        )
    return src


def measurer(
    fmt: Format, float_path: Path, source: Source, signature: Signature, scorer: Scorer | None = None
) -> tuple[Measurer, Callable[[], None]]:
    """Score written models of ``fmt`` against ``float_path``; returns the measurer and its close()."""
    run_f, close_f = runtime_runner(fmt, float_path)
    if scorer is None:
        return measure_with(
            run_f, lambda p: runtime_runner(fmt, p), lambda f, q: evaluate(f, q, source, signature)
        ), close_f
    base = scorer(run_f)
    cosine = measure_with(run_f, lambda p: runtime_runner(fmt, p), lambda f, q: evaluate(f, q, source, signature))

    def measure(path: Path) -> Measure:
        run_q, close_q = runtime_runner(fmt, path)
        try:
            drop = round(base - scorer(run_q), 4)
        finally:
            close_q()
        return Measure(drop=drop, cosine=cosine(path).cosine)

    return measure, close_f


def fit(
    budget: Budget,
    out: Path,
    quantize: Quantizer,
    measure: Measurer,
    rank: Callable[[], list[Layer]],
    *,
    ranked_by: str,
    data: str,
) -> BudgetResult:
    """Measure the plain INT8 at ``out``; when it misses, rank the layers and search.

    The SQNR ranking ``rank`` builds is refined by measurement (``probe``):
    its first ``PROBE_LIMIT`` layers are each tried alone in float and ordered
    by what that did to the budget's measure, so a layer whose noise the SQNR
    hides (a concatenation of boxes and scores: the boxes dominate its power)
    is still found.
    """
    plain = measure(out)
    if budget.holds(plain):
        return search(quantize, measure, [], budget, out, plain=plain, ranked_by="not needed", data=data)
    ranking = probe(quantize, measure, rank()[:PROBE_LIMIT], budget, plain, out.suffix)
    how = f"measured: each of the first {PROBE_LIMIT} by {ranked_by} alone in float"
    return search(quantize, measure, ranking, budget, out, plain=plain, ranked_by=how, data=data)


def probe(
    quantize: Quantizer, measure: Measurer, layers: Sequence[Layer], budget: Budget, plain: Measure, suffix: str
) -> list[Layer]:
    """``layers`` re-ordered by how much keeping each one alone in float improves on ``plain``, best first.

    Layers that do not improve at all are dropped; ties keep the SQNR order.
    """
    scored = []
    with tempfile.TemporaryDirectory(prefix="fwx-probe-") as tmp:
        for i, layer in enumerate(layers):
            path = Path(tmp) / f"probe{i}{suffix}"
            quantize(list(layer.names), path)
            m = measure(path)
            if budget.key(m) < budget.key(plain):
                scored.append((budget.key(m), i, replace(layer, score=round(budget.miss(plain) - budget.miss(m), 4))))
    return [layer for _, _, layer in sorted(scored)]


def rank_batches(source: Source, signature: Signature, n: int) -> Iterator[dict[str, np.ndarray]]:
    """The first ``n`` samples as batches, for the rankings."""
    n = min(n, source.count)
    return iter(BatchStream(source, signature, n, batch_size_for(signature, n)))


def tflite_dataset(
    source: Source, signature: Signature, input_names: Sequence[str], n: int
) -> Callable[[], Iterator[list[np.ndarray]]]:
    """The debugger's dataset: one sample at a time, as a list in the TFLite model's input order."""
    order = [_signature_name(name, signature, i) for i, name in enumerate(input_names)]

    def gen() -> Iterator[list[np.ndarray]]:
        for batch in BatchStream(source, signature, min(n, source.count), 1):
            yield [np.asarray(batch[k]) for k in order]

    return gen


def _signature_name(tflite_name: str, signature: Signature, index: int) -> str:
    """``serving_default_image:0`` -> ``image`` (the converter's naming); by position when it does not match."""
    bare = re.sub(r"^serving_default_|:\d+$", "", tflite_name)
    return bare if bare in signature.input_names else signature.input_names[index]


def _sources(q: QuantOptions, signature: Signature) -> tuple[Source, Source]:
    """(calibration samples for the ranking, samples the budget is measured on)."""
    calib = None if q.is_random else open_source(q.calibration_data or "", signature, q.preprocess)
    src = budget_source(q.eval_data, calib, signature, q.budget, q.preprocess)
    return (calib or src), src


def fit_onnx(
    q: QuantOptions, fp32: Path, model_in: Path, out: Path, signature: Signature, quantize: Quantizer
) -> BudgetResult:
    """The budget for an ONNX QDQ model at ``out``: ``nodes_to_exclude`` grows until it holds."""
    from fwx.quantize.sensitivity import ONNX_RANKING, onnx_ranking

    calib, src = _sources(q, signature)
    measure, close = measurer(Format.ONNX, fp32, src, signature)
    try:
        return fit(
            q.budget,
            out,
            quantize,
            measure,
            lambda: onnx_ranking(model_in, out, rank_batches(calib, signature, RANK_SAMPLES)),
            ranked_by=ONNX_RANKING,
            data=src.describe(),
        )
    finally:
        close()


def fit_tflite(
    q: QuantOptions, float_path: Path, requantizer: TFLiteRequantizer, out: Path, signature: Signature
) -> BudgetResult:
    """The budget for a TFLite int8 model at ``out``: ``denylisted_nodes`` grows until it holds."""
    from fwx.quantize.sensitivity import TFLITE_RANKING, tflite_input_order, tflite_ranking

    calib, src = _sources(q, signature)
    measure, close = measurer(Format.TFLITE, float_path, src, signature)

    def rank() -> list[Layer]:
        order = tflite_input_order(requantizer.quantize(verify=True))
        return tflite_ranking(requantizer, tflite_dataset(calib, signature, order, RANK_SAMPLES))

    try:
        return fit(q.budget, out, requantizer.write, measure, rank, ranked_by=TFLITE_RANKING, data=src.describe())
    finally:
        close()
