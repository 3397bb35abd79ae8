"""Accuracy-budgeted INT8: keep the most sensitive layers in float until a budget holds.

A budget is a bound on what quantising may cost, measured against the float
model: top-1 points lost on labelled eval data (``--max-drop``), or, without
labels, the mean cosine of the outputs (``--min-cosine``) and the top-1
agreement (``--min-agreement``). Plain INT8 is measured first; when it misses,
the layers are ranked by a per-layer error (``fwx.quantize.sensitivity``) and
tried one at a time, worst first. Every step is re-quantised and re-measured:
a ranking by quantisation noise alone does not predict accuracy (keeping some
"noisy" layers in float makes a model worse), so a layer stays in float only
when the measure improves, and the search stops as soon as the budget holds or
after ``max_steps`` tries, with an error that names the best it reached.

The loop is format-free: a format gives it a ``Quantizer`` (write the model with
these layers in float) and a ``Measurer`` (score a written model).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fwx.errors import ExportError, UsageError
from fwx.manifest import size_of
from fwx.quantize.info import BudgetResult, EvalResult

DEFAULT_MAX_STEPS = 8


class BudgetMissedError(ExportError):
    """INT8 could not be brought within the accuracy budget by keeping layers in float."""

    miss: float = float("inf")  # how far the best model tried stayed outside the budget (``Budget.miss``)
    best: str = ""  # that model's measure, described


@dataclass(frozen=True)
class Layer:
    """One layer that can stay in float: its name in the artifact, op type, and how much error it adds."""

    name: str
    op: str
    score: float  # higher = more error added (ranked first)
    also: tuple[str, ...] = ()  # nodes fused with it (a Conv's Relu) that must stay in float with it

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.also)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "op": self.op, "score": round(self.score, 3)}
        if self.also:
            data["with"] = list(self.also)
        return data


@dataclass(frozen=True)
class Measure:
    """The cost of one quantised model against the float one (None where not measured)."""

    drop: float | None = None  # points (of top-1, or of a caller's own score such as mAP)
    cosine: float | None = None  # mean over samples
    agreement: float | None = None  # fraction of samples whose top-1 matches the float model
    samples: int | None = None  # how many samples top-1 was counted on: one of them is 100/samples points

    @classmethod
    def of(cls, ev: EvalResult) -> Measure:
        return cls(ev.drop_points, ev.cosine_mean, ev.agreement, ev.samples)

    def to_json(self) -> dict[str, Any]:
        return {
            "drop_points": self.drop,
            "cosine_mean": self.cosine,
            "agreement": self.agreement,
            "samples": self.samples,
        }

    def describe(self) -> str:
        parts = []
        if self.drop is not None:
            parts.append(f"drop {self.drop:.2f} pt")
        if self.agreement is not None:
            parts.append(f"agreement {self.agreement * 100:.2f}%")
        if self.cosine is not None:
            parts.append(f"cosine {self.cosine:.6f}")
        return ", ".join(parts) or "not measured"


@dataclass(frozen=True)
class Budget:
    """What INT8 may cost; every bound given must hold. ``metric`` names what ``max_drop`` counts."""

    max_drop: float | None = None
    min_cosine: float | None = None
    min_agreement: float | None = None
    max_steps: int = DEFAULT_MAX_STEPS
    metric: str = "top-1"
    #: A caller's own score (``metric`` other than top-1): the smallest change of ``drop`` that counts, e.g. what
    #: one object is worth in mAP on the searched data; 0 counts any change.
    step: float = 0.0

    def __post_init__(self) -> None:
        if self.max_drop is not None and self.max_drop < 0:
            raise UsageError(f"--max-drop must be >= 0 points, got {self.max_drop}")
        for flag, v in (("--min-cosine", self.min_cosine), ("--min-agreement", self.min_agreement)):
            if v is not None and not 0 <= v <= 1:
                raise UsageError(f"{flag} must be between 0 and 1, got {v}", hint="e.g. 0.999 (a fraction, not %)")
        if self.max_steps < 1:
            raise UsageError(f"--budget-steps must be a positive integer, got {self.max_steps}")
        if self.step < 0:
            raise UsageError(f"a budget's step must be >= 0 points, got {self.step}")

    @property
    def active(self) -> bool:
        return any(v is not None for v in (self.max_drop, self.min_cosine, self.min_agreement))

    @property
    def needs_labels(self) -> bool:
        return self.max_drop is not None and self.metric == "top-1"

    def describe(self) -> str:
        parts = []
        if self.max_drop is not None:
            parts.append(f"{self.metric} drop <= {self.max_drop:g} pt")
        if self.min_cosine is not None:
            parts.append(f"cosine >= {self.min_cosine!r}")
        if self.min_agreement is not None:
            parts.append(f"agreement >= {self.min_agreement!r}")
        return ", ".join(parts)

    def miss(self, m: Measure) -> float:
        """How far ``m`` is outside the budget, in points (0 = within). An unmeasured bound counts as missed."""
        total = 0.0
        if self.max_drop is not None:
            total += 100.0 if m.drop is None else max(0.0, m.drop - self.max_drop)
        if self.min_cosine is not None:
            total += 100.0 if m.cosine is None else max(0.0, self.min_cosine - m.cosine) * 100
        if self.min_agreement is not None:
            total += 100.0 if m.agreement is None else max(0.0, self.min_agreement - m.agreement) * 100
        return round(total, 6)

    def holds(self, m: Measure) -> bool:
        return self.miss(m) == 0.0

    def resolution(self, m: Measure) -> float:
        """The smallest change of ``miss`` that is not one sample's luck: 100/samples points for a top-1
        bound (``--max-drop`` on top-1, ``--min-agreement``); the caller's ``step`` for its own score; 0 for
        cosine alone."""
        counted = (self.max_drop is not None and self.metric == "top-1") or self.min_agreement is not None
        if counted and m.samples:
            return 100.0 / m.samples
        return self.step if self.max_drop is not None and self.metric != "top-1" else 0.0

    def improves(self, m: Measure, best: Measure) -> bool:
        """Whether ``m`` beats ``best`` by more than the resolution: a layer kept in float must buy
        something (on a ViT, cosine gains of 1e-5 at an unchanged top-1 once kept 3 layers for nothing)."""
        return self.miss(m) < self.miss(best) - self.resolution(m) - 1e-9

    def key(self, m: Measure) -> tuple[float, float]:
        """Order measures: smaller miss first, then higher cosine (continuous, breaks ties of top-1 counts)."""
        return (self.miss(m), -(m.cosine if m.cosine is not None else 0.0))


Quantizer = Callable[[Sequence[str], Path], None]  # write the model with these layers in float to the path
Measurer = Callable[[Path], Measure]


def search(
    quantize: Quantizer,
    measure: Measurer,
    ranking: Sequence[Layer],
    budget: Budget,
    out: Path,
    *,
    plain: Measure,
    ranked_by: str,
    data: str = "",
) -> BudgetResult:
    """Keep layers of ``ranking`` in float one at a time, re-measuring each step, until ``budget`` holds.

    ``out`` holds the plain INT8 model on entry and the best model found on a
    successful return. Raises ``BudgetMissedError`` (``out`` untouched) when
    the budget still misses after ``budget.max_steps`` tries.
    """
    result = BudgetResult(
        budget=budget.describe(),
        met=False,
        ranking=ranked_by,
        data=data,
        plain=plain.to_json(),
        size_int8=size_of(out),
    )
    kept: list[Layer] = []
    best = plain
    with tempfile.TemporaryDirectory(prefix="fwx-budget-") as tmp:
        best_path = out
        for i, layer in enumerate(ranking[: budget.max_steps]):
            if budget.holds(best):
                break
            trial = Path(tmp) / f"step{i}{out.suffix}"
            quantize([n for k in (*kept, layer) for n in k.names], trial)
            m = measure(trial)
            better = budget.improves(m, best)
            result.steps.append({"layer": layer.name, "op": layer.op, "kept_float": better, **m.to_json()})
            if better:
                kept.append(layer)
                best, best_path = m, trial
        result.met = budget.holds(best)
        result.final = best.to_json()
        result.float_layers = [k.to_json() for k in kept]
        if not result.met:
            raise _missed(budget, best, kept, len(result.steps), len(ranking))
        if best_path != out:
            shutil.copyfile(best_path, out)
    result.size_final = size_of(out)
    return result


def _missed(budget: Budget, best: Measure, kept: list[Layer], steps: int, ranked: int) -> BudgetMissedError:
    layers = ", ".join(k.name for k in kept[:4]) + (", ..." if len(kept) > 4 else "")
    where = f"{len(kept)} layer(s) in float ({layers})" if kept else "no layer in float helped"
    err = BudgetMissedError(
        f"int8 misses the budget ({budget.describe()}): the best reached is {best.describe()} with {where}, "
        f"after {steps} of {ranked} ranked layer(s) tried",
        hint="loosen the budget, calibrate on more representative data, raise --budget-steps, or use --quantize fp16",
    )
    err.miss, err.best = budget.miss(best), best.describe()
    return err


def measure_with(
    run_float: Any, run_quant_of: Callable[[Path], tuple[Any, Callable[[], None]]], evaluate: Any
) -> Measurer:
    """A ``Measurer`` that scores each written model against one float runner kept open."""

    def measure(path: Path) -> Measure:
        run_q, close = run_quant_of(path)
        try:
            return Measure.of(evaluate(run_float, run_q))
        finally:
            close()

    return measure


def budget_verdict(quantization: object) -> str | None:
    """The verdict of a met budget, for the validation of the artifact it shaped; None without one.

    ``quantization`` is the artifact's receipt (``QuantInfo.to_json``). A budget
    is measured on the eval data it names, which is more and better data than
    the few validation samples; judging the same artifact again there could
    only contradict it (a VGG that met ``--max-drop 0`` on 450 held-out digits
    failed a 17-sample gate on one flipped prediction). The verdict quotes the
    cost on the samples the search never saw, where the receipt has them.
    """
    if not isinstance(quantization, dict) or not isinstance(b := quantization.get("budget"), dict) or not b.get("met"):
        return None
    split, held = b.get("split"), b.get("holdout")
    if isinstance(split, dict) and isinstance(held, dict) and isinstance(held.get("final"), dict):
        on = f"{split.get('search_samples')} samples searched"
        return (
            f"budget {b.get('budget')} met on {on}; {split.get('holdout_samples')} held out: {_measured(held['final'])}"
        )
    ev = quantization.get("eval")
    n = ev.get("samples") if isinstance(ev, dict) else None
    on = f"{n} samples" if isinstance(n, int) else str(b.get("data") or "the eval data")
    final = b.get("final")
    measured = _measured(final if isinstance(final, dict) else {})
    return f"budget {b.get('budget')} met on {on}" + (f": {measured}" if measured else "")


def _measured(m: dict[str, Any]) -> str:
    return Measure(m.get("drop_points"), m.get("cosine_mean"), m.get("agreement")).describe()
