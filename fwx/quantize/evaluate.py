"""The accuracy cost of quantising, measured on the user's eval data.

Both artifacts, float and quantised, run through the project's runtimes
(``fwx.runtimes``), the same code the validators and the server use, so the
number reported is the number users will see. With labels: top-1 accuracy of
each and the drop in points. Always: top-1 agreement with the float model and
the cosine similarity of the outputs, per sample.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fwx.errors import InputError
from fwx.formats import Format
from fwx.quantize.data import Source
from fwx.quantize.info import EvalResult
from fwx.quantize.stream import BatchStream, batch_size_for
from fwx.signature import Signature

Runner = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
EVAL_BATCH = 64


class _Tally:
    def __init__(self, labels: np.ndarray | None) -> None:
        self.labels = labels
        self.seen = 0
        self.correct_f = self.correct_q = self.agree = 0
        self.cosines: list[np.ndarray] = []

    def add(self, yf: np.ndarray, yq: np.ndarray, n: int) -> None:
        a = np.asarray(yf, np.float64).reshape(n, -1)
        b = np.asarray(yq, np.float64).reshape(n, -1)
        na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
        dot = (a * b).sum(axis=1)
        both_zero = (na == 0) & (nb == 0)
        self.cosines.append(np.where(both_zero, 1.0, dot / np.maximum(na * nb, 1e-30)))
        if a.shape[1] > 1:
            pf, pq = a.argmax(1), b.argmax(1)
            self.agree += int((pf == pq).sum())
            if self.labels is not None:
                truth = self.labels[self.seen : self.seen + n]
                self.correct_f += int((pf == truth).sum())
                self.correct_q += int((pq == truth).sum())
        self.seen += n

    def result(self, output: str, classes: bool) -> EvalResult:
        cos = np.concatenate(self.cosines) if self.cosines else np.zeros(0)
        res = EvalResult(
            samples=self.seen,
            output=output,
            cosine_mean=round(float(cos.mean()), 6) if cos.size else None,
            cosine_min=round(float(cos.min()), 6) if cos.size else None,
        )
        if classes and self.seen:
            res.agreement = round(self.agree / self.seen, 6)
            if self.labels is not None:
                res.accuracy_float = round(self.correct_f / self.seen, 6)
                res.accuracy_quant = round(self.correct_q / self.seen, 6)
        return res


def _labels(source: Source) -> np.ndarray | None:
    labels = source.labels()
    if labels is None:
        return None
    labels = np.asarray(labels)
    if labels.ndim == 2:  # one-hot
        labels = labels.argmax(1)
    if labels.ndim != 1 or len(labels) != source.count:
        raise InputError(
            f"{source.describe()}: 'labels' has shape {list(labels.shape)} for {source.count} samples",
            hint="store one integer class per sample (or one-hot rows)",
        )
    return labels.astype(np.int64)


def evaluate(
    float_run: Runner, quant_run: Runner, source: Source, signature: Signature, output: str | None = None
) -> EvalResult:
    """Run every eval sample through both models; compare on ``output`` (default: the first)."""
    labels = _labels(source)
    bs = batch_size_for(signature, EVAL_BATCH)
    tally = _Tally(labels)
    name = output
    classes = True
    for batch in BatchStream(source, signature, source.count, bs):
        n = len(next(iter(batch.values()))) if bs > 1 else 1
        yf, yq = float_run(batch), quant_run(batch)
        name = name or (signature.output_names[0] if signature.outputs else next(iter(yf)))
        if name not in yf or name not in yq:
            raise InputError(f"the model has no output {name!r} to evaluate", hint=f"outputs: {', '.join(yf)}")
        classes = classes and np.asarray(yf[name]).size // n > 1
        tally.add(yf[name], yq[name], n)
    return tally.result(name or "", classes)


def runtime_runner(fmt: Format, path: Path, **options: Any) -> tuple[Runner, Callable[[], None]]:
    """A runner over the project's runtime for ``fmt`` (which (de)quantises integer TFLite I/O itself)."""
    from fwx.runtimes.base import load_runtime

    rt = load_runtime(fmt, path, **options)
    return rt.infer, rt.close


def evaluate_artifacts(
    fmt: Format, float_path: Path, quant_path: Path, source: Source, signature: Signature
) -> EvalResult:
    run_f, close_f = runtime_runner(fmt, float_path)
    run_q, close_q = runtime_runner(fmt, quant_path)
    try:
        return evaluate(run_f, run_q, source, signature)
    finally:
        close_f()
        close_q()
