"""The pure numpy metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fwx.validators.compare import OutputAccumulator, looks_like_scores, metrics, min_required_atol


def test_identical_arrays() -> None:
    a = np.array([1.0, -2.0, 3.0])
    m = metrics(a, a.copy(), 1e-3)
    assert m["max_abs"] == 0
    assert m["cosine"] == pytest.approx(1.0)
    assert m["snr_db"] == math.inf
    assert m["min_atol"] == 0


def test_known_differences() -> None:
    ref, cand = np.array([1.0, 2.0, 0.0, 4.0]), np.array([1.1, 2.0, 0.0, 3.0])
    m = metrics(ref, cand, 0.0)
    assert m["max_abs"] == pytest.approx(1.0)
    assert m["mean_abs"] == pytest.approx(0.275)
    assert m["max_rel"] == pytest.approx(0.25)  # the zero reference element is guarded, not divided by
    assert m["snr_db"] == pytest.approx(10 * math.log10(21 / 1.01))
    assert m["min_atol"] == pytest.approx(1.0)


def test_min_required_atol_uses_rtol() -> None:
    ref, cand = np.array([100.0, 1.0]), np.array([100.5, 1.01])
    assert min_required_atol(ref, cand, 0.0) == pytest.approx(0.5)
    assert min_required_atol(ref, cand, 1e-2) == pytest.approx(0.0)  # 0.5 <= 0.01*100 and 0.01 <= 0.01
    assert min_required_atol(ref, cand, 1e-3) == pytest.approx(0.4)
    assert np.allclose(cand, ref, atol=0.4 + 1e-12, rtol=1e-3)


def test_zero_vectors() -> None:
    z = np.zeros(3)
    assert metrics(z, z, 0)["cosine"] == 1.0
    assert metrics(z, np.ones(3), 0)["cosine"] == 0.0
    assert metrics(z, np.ones(3), 0)["max_rel"] > 1e6  # big but finite


def test_accumulator_nan_shape_and_top1() -> None:
    acc = OutputAccumulator("logits")
    ref = np.array([[0.0, 1.0], [2.0, 1.0]], np.float32)
    acc.add(ref, np.array([[0.0, 1.0], [0.5, 1.0]], np.float32), 0)
    acc.add(ref, np.array([[np.nan, 1.0], [2.0, 1.0]], np.float32), 1)
    acc.add(ref, np.zeros((3, 2), np.float32), 2)
    r = acc.result(1e-3)
    assert r["top1"] == pytest.approx(2 / 4)  # one real flip, and the NaN row (argmax picks the NaN)
    assert r["nan"] == 1
    assert r["new_nonfinite"] == 1
    assert r["min_atol"] == math.inf
    assert acc.problems == ["sample 2: shape [3, 2], reference [2, 2]"]
    assert r["points"]["ref"].size == 7


def test_scores_heuristic() -> None:
    assert looks_like_scores(np.zeros((2, 3), np.float32))
    assert not looks_like_scores(np.zeros((2, 1), np.float32))
    assert not looks_like_scores(np.zeros((2, 3), np.int64))
    assert not looks_like_scores(np.zeros((2, 3, 4), np.float32))


def test_string_outputs_compared_exactly() -> None:
    acc = OutputAccumulator("label")
    acc.add(np.array([b"a"], dtype=object), np.array([b"b"], dtype=object), 0)
    assert acc.problems == ["sample 0: values differ"]
