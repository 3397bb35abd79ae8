"""The budget searches on one part of the eval data and reports its cost on a part it never saw.

The trained digits CNN (scikit-learn ``load_digits``) is quantised with a
budget; the held-out cost fwx records must equal an independent measurement
(onnxruntime directly, numpy top-1) on the held-out indices the seed draws,
and none of those samples may have been searched on.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fwx.quantize.budget import budget_verdict
from fwx.quantize.data import open_source
from fwx.quantize.options import QuantOptions
from fwx.quantize.report import render, summary
from fwx.quantize.split import HOLDOUT_FRACTION, SPLIT_SEED, parts, split
from tests.quantize.conftest import SIGNATURE, Digits


def test_the_split_is_seeded_disjoint_and_complete() -> None:
    a, b = split(450), split(450)
    assert a == b
    assert set(a.search).isdisjoint(a.holdout)
    assert sorted(a.search + a.holdout) == list(range(450))
    assert len(a.holdout) == round(450 * HOLDOUT_FRACTION)
    assert list(a.search) == sorted(a.search)
    assert split(450, seed=SPLIT_SEED + 1) != a


def test_a_part_reads_its_own_rows_and_labels(digits: Digits) -> None:
    src = open_source(digits.eval, SIGNATURE, purpose="eval")
    s, searched, held = parts(src)
    rows = [r["image"] for r in held.samples(SIGNATURE, held.count)]
    assert len(rows) == len(s.holdout)
    np.testing.assert_array_equal(np.concatenate(rows), digits.x_test[list(s.holdout)])
    labels = held.labels()
    assert labels is not None
    np.testing.assert_array_equal(labels, digits.y_test[list(s.holdout)])
    assert searched.count + held.count == src.count


def _independent(model: Path, fp32: Path, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(top-1 drop in points, agreement) measured with onnxruntime alone."""
    import onnxruntime as ort

    def top1(path: Path) -> np.ndarray:
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return np.asarray(sess.run(None, {"image": x})[0]).argmax(1)

    pf, pq = top1(fp32), top1(model)
    return round(float((pf == y).mean() - (pq == y).mean()) * 100, 4), float((pf == pq).mean())


@pytest.mark.parametrize("graph", [None, "torch.onnx.export(dynamo=False)"])
def test_onnx_budget_reports_its_cost_on_samples_the_search_never_saw(
    digits: Digits, tmp_path: Path, graph: str | None
) -> None:
    from fwx.quantize.onnx import quantize_onnx

    opts = QuantOptions("int8", calibration_data=str(digits.calib), eval_data=str(digits.eval), max_drop=0.5)
    out = tmp_path / "q.onnx"
    info = quantize_onnx(digits.onnx, out, SIGNATURE, opts, graph=graph)
    b = info.budget
    assert b is not None
    assert b.met
    s = split(len(digits.y_test))
    assert b.split == {
        "seed": SPLIT_SEED,
        "search_samples": len(s.search),
        "holdout_samples": len(s.holdout),
        "holdout_fraction": HOLDOUT_FRACTION,
    }
    assert b.final["samples"] == len(s.search)
    assert b.holdout["final"]["samples"] == len(s.holdout)
    assert info.eval is not None
    assert info.eval.samples == len(s.holdout)
    idx = list(s.holdout)
    drop, agreement = _independent(out, digits.onnx, digits.x_test[idx], digits.y_test[idx])
    assert b.holdout["final"]["drop_points"] == pytest.approx(drop, abs=1e-6)
    assert b.holdout["final"]["agreement"] == pytest.approx(agreement, abs=1e-6)
    assert b.graph == graph if graph else b.graph.startswith("pytorch")  # the exporter, else the file's producer
    text = render(info)
    assert "held-out cost" in text
    assert "budget graph" in text
    assert f"{len(s.holdout)} held out" in (budget_verdict(info.to_json()) or "")
    assert "held-out samples" in summary(info)
