"""Pure numpy metrics comparing a candidate output to the reference output.

No framework imports, no policy: this module only measures. Samples of one
output are accumulated (batch 1 and batch 3 have different shapes) and the
metrics are computed over all of them at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Points kept per output for the HTML report's histogram and scatter.
PLOT_POINTS = 4000


def looks_like_scores(arr: np.ndarray) -> bool:
    """2-D float with more than one column: class scores/logits, so top-1 agreement is meaningful."""
    return arr.ndim == 2 and arr.shape[-1] > 1 and arr.dtype.kind == "f"


def min_required_atol(ref: np.ndarray, cand: np.ndarray, rtol: float) -> float:
    """Smallest atol with which ``|cand - ref| <= atol + rtol * |ref|`` holds everywhere."""
    if ref.size == 0:
        return 0.0
    need = np.abs(cand - ref) - rtol * np.abs(ref)
    worst = float(np.max(need))
    return max(worst, 0.0) if math.isfinite(worst) else math.inf


def metrics(ref: np.ndarray, cand: np.ndarray, rtol: float) -> dict[str, float]:
    """Error metrics over two flat float64 arrays of equal length (finite elements only)."""
    if ref.size == 0:
        return {
            "max_abs": 0.0,
            "mean_abs": 0.0,
            "max_rel": 0.0,
            "cosine": 1.0,
            "snr_db": math.inf,
            "min_atol": 0.0,
            "scale": 0.0,
        }
    diff = np.abs(cand - ref)
    scale = float(np.max(np.abs(ref)))
    floor = max(1e-6 * scale, float(np.finfo(np.float32).tiny))
    rn, cn = float(np.linalg.norm(ref)), float(np.linalg.norm(cand))
    if rn == 0.0 and cn == 0.0:
        cosine = 1.0
    elif rn == 0.0 or cn == 0.0:
        cosine = 0.0
    else:
        cosine = float(np.dot(ref, cand) / (rn * cn))
    noise = float(np.sum(diff * diff))
    signal = float(np.sum(ref * ref))
    snr = math.inf if noise == 0.0 else (10.0 * math.log10(signal / noise) if signal > 0 else -math.inf)
    return {
        "max_abs": float(np.max(diff)),
        "mean_abs": float(np.mean(diff)),
        "max_rel": float(np.max(diff / np.maximum(np.abs(ref), floor))),
        "cosine": cosine,
        "snr_db": snr,
        "min_atol": min_required_atol(ref, cand, rtol),
        "scale": scale,  # the largest |reference|: a default atol is per unit of it (fwx.validators.policy)
    }


@dataclass
class OutputAccumulator:
    """Collects one output's (reference, candidate) pairs over all samples."""

    name: str
    refs: list[np.ndarray] = field(default_factory=list)
    cands: list[np.ndarray] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    top1_hits: int = 0
    top1_rows: int = 0
    label_hits_ref: int = 0
    label_hits_cand: int = 0
    label_rows: int = 0
    dtypes: set[str] = field(default_factory=set)
    ref_dtype: str = ""
    strings: int = 0  # string elements compared for equality (a lookup's invert=True output)

    def add(self, ref: np.ndarray, cand: np.ndarray, sample: int, labels: np.ndarray | None = None) -> None:
        ref, cand = np.asarray(ref), np.asarray(cand)
        self.ref_dtype = ref.dtype.name
        self.dtypes.add(cand.dtype.name)
        if ref.shape != cand.shape:
            self.problems.append(f"sample {sample}: shape {list(cand.shape)}, reference {list(ref.shape)}")
            return
        if ref.dtype.kind in "OSU" or cand.dtype.kind in "OSU":
            self.strings += int(ref.size)
            if not np.array_equal(ref, cand):
                self.problems.append(f"sample {sample}: values differ")
            return
        r, c = ref.astype(np.float64), cand.astype(np.float64)
        self.refs.append(r.ravel())
        self.cands.append(c.ravel())
        if looks_like_scores(ref):
            ra, ca = np.argmax(r, axis=-1), np.argmax(c, axis=-1)
            self.top1_hits += int(np.sum(ra == ca))
            self.top1_rows += int(ra.size)
            if labels is not None and labels.shape[:1] == ra.shape:
                self.label_hits_ref += int(np.sum(ra == labels))
                self.label_hits_cand += int(np.sum(ca == labels))
                self.label_rows += int(ra.size)

    def result(self, rtol: float, *, keep_points: bool = True) -> dict[str, Any]:
        """All metrics of this output; ``points`` (for plots) is popped before JSON."""
        r = np.concatenate(self.refs) if self.refs else np.zeros(0)
        c = np.concatenate(self.cands) if self.cands else np.zeros(0)
        finite_r, finite_c = np.isfinite(r), np.isfinite(c)
        both = finite_r & finite_c
        out: dict[str, Any] = metrics(r[both], c[both], rtol)
        out.update(
            elements=int(r.size) + self.strings,
            nan=int(np.sum(np.isnan(c))),
            inf=int(np.sum(np.isinf(c))),
            ref_nonfinite=int(np.sum(~finite_r)),
            new_nonfinite=int(np.sum(finite_r & ~finite_c)),
            top1=self.top1_hits / self.top1_rows if self.top1_rows else None,
            top1_rows=self.top1_rows,
            dtype=",".join(sorted(self.dtypes)),
            ref_dtype=self.ref_dtype,
        )
        if out["new_nonfinite"]:
            out["min_atol"] = math.inf
        if self.label_rows:
            out["accuracy_ref"] = self.label_hits_ref / self.label_rows
            out["accuracy"] = self.label_hits_cand / self.label_rows
        if keep_points:
            out["points"] = _plot_points(r[both], c[both])
        return out


def _plot_points(r: np.ndarray, c: np.ndarray) -> dict[str, np.ndarray]:
    if r.size > PLOT_POINTS:
        idx = np.random.default_rng(0).choice(r.size, PLOT_POINTS, replace=False)
        r, c = r[idx], c[idx]
    return {"ref": r, "cand": c}
