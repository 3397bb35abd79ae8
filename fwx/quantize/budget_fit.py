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
from fwx.quantize.split import Split, parts
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
    report: Measurer | None = None,
) -> BudgetResult:
    """Measure the plain INT8 at ``out``; when it misses, rank the layers and search.

    The SQNR ranking ``rank`` builds is refined by measurement (``probe``):
    its first ``PROBE_LIMIT`` layers are each tried alone in float and ordered
    by what that did to the budget's measure, so a layer whose noise the SQNR
    hides (a concatenation of boxes and scores: the boxes dominate its power)
    is still found. ``report`` measures plain INT8 and the published model on
    samples ``measure`` never saw (``fwx.quantize.split``).
    """
    plain = measure(out)
    held = report(out) if report is not None else None
    if budget.holds(plain):
        result = search(quantize, measure, [], budget, out, plain=plain, ranked_by="not needed", data=data)
    else:
        ranking = probe(quantize, measure, rank()[:PROBE_LIMIT], budget, plain, out.suffix)
        how = f"measured: each of the first {PROBE_LIMIT} by {ranked_by} alone in float"
        result = search(quantize, measure, ranking, budget, out, plain=plain, ranked_by=how, data=data)
    if report is not None and held is not None:
        final = held if not result.float_layers else report(out)
        result.holdout = {"plain": held.to_json(), "final": final.to_json()}
    return result


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


def _sources(q: QuantOptions, signature: Signature) -> tuple[Source, Split, Source, Source, str]:
    """(calibration samples for the ranking, the split, the part searched on, the part held out, what they are)."""
    calib = None if q.is_random else open_source(q.calibration_data or "", signature, q.preprocess)
    src = budget_source(q.eval_data, calib, signature, q.budget, q.preprocess)
    s, searched, held = parts(src, q.holdout_fraction)
    return (calib or src), s, searched, held, f"{src.describe()}: {s.describe()}"


def eval_part(q: QuantOptions, source: Source) -> Source:
    """The eval samples a quantised model's cost is reported on: with a budget, only those its search never saw."""
    return parts(source, q.holdout_fraction)[2] if q.static and q.budget.active else source


def _fit(
    q: QuantOptions,
    fmt: Format,
    float_path: Path,
    signature: Signature,
    graph: str,
    run: Callable[[Source, Measurer, Measurer, str], BudgetResult],
) -> BudgetResult:
    """Open the float runners of both parts, run the format's search, and record the split and the graph."""
    calib, s, searched, held, data = _sources(q, signature)
    measure, close = measurer(fmt, float_path, searched, signature)
    report, close_report = measurer(fmt, float_path, held, signature)
    try:
        result = run(calib, measure, report, data)
    finally:
        close()
        close_report()
    result.graph, result.split = graph, s.to_json()
    return result


def holdout_warning(budget: Budget, result: BudgetResult) -> str | None:
    """A warning when the published model is outside the budget on the held-out part by more than one sample."""
    final = result.holdout.get("final")
    if not isinstance(final, dict):
        return None
    m = Measure(final.get("drop_points"), final.get("cosine_mean"), final.get("agreement"), final.get("samples"))
    if budget.miss(m) <= budget.resolution(m) + 1e-9:
        return None
    return (
        f"the budget ({budget.describe()}) held on the {result.split.get('search_samples')} samples searched on, "
        f"but not on the {result.split.get('holdout_samples')} held out: {m.describe()}; "
        "more --eval-data makes both parts more alike"
    )


def fit_onnx(
    q: QuantOptions, fp32: Path, model_in: Path, out: Path, signature: Signature, quantize: Quantizer, graph: str
) -> BudgetResult:
    """The budget for an ONNX QDQ model at ``out``: ``nodes_to_exclude`` grows until it holds."""
    from fwx.quantize.sensitivity import ONNX_RANKING, onnx_ranking

    def run(calib: Source, measure: Measurer, report: Measurer, data: str) -> BudgetResult:
        return fit(
            q.budget,
            out,
            quantize,
            measure,
            lambda: onnx_ranking(model_in, out, rank_batches(calib, signature, RANK_SAMPLES)),
            ranked_by=ONNX_RANKING,
            data=data,
            report=report,
        )

    return _fit(q, Format.ONNX, fp32, signature, graph, run)


def fit_tflite(
    q: QuantOptions, float_path: Path, requantizer: TFLiteRequantizer, out: Path, signature: Signature, graph: str
) -> BudgetResult:
    """The budget for a TFLite int8 model at ``out``: ``denylisted_nodes`` grows until it holds."""
    from fwx.quantize.sensitivity import TFLITE_RANKING, tflite_input_order, tflite_ranking

    def run(calib: Source, measure: Measurer, report: Measurer, data: str) -> BudgetResult:
        def rank() -> list[Layer]:
            order = tflite_input_order(requantizer.quantize(verify=True))
            return tflite_ranking(requantizer, tflite_dataset(calib, signature, order, RANK_SAMPLES))

        return fit(
            q.budget,
            out,
            requantizer.write,
            measure,
            rank,
            ranked_by=TFLITE_RANKING,
            data=data,
            report=report,
        )

    return _fit(q, Format.TFLITE, float_path, signature, graph, run)
