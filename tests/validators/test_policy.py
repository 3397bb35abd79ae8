"""Tolerance policy: defaults per precision, overrides, int8 rules, --tolerance parsing."""

from __future__ import annotations

import pytest

from fwx.errors import UsageError
from fwx.validators.policy import Policy, Tolerance, parse_tolerance_override, precision_class


def test_defaults_by_precision() -> None:
    p = Policy()
    assert p.tolerance("fp32", "y") == Tolerance(1e-4, 1e-3)
    assert p.tolerance("float16", "y") == Tolerance(1e-2, 1e-2)
    assert p.tolerance("int8", "y") is None
    assert precision_class("int8-dynamic") == "int8"
    assert precision_class(None) == "fp32"


def test_overrides() -> None:
    p = Policy(atol=1e-3, per_output={"y": Tolerance(1.0, 0.5)})
    assert p.tolerance("fp32", "x") == Tolerance(1e-3, 1e-3)
    assert p.tolerance("fp32", "y") == Tolerance(1.0, 0.5)
    assert p.tolerance("int8", "x") == Tolerance(1e-3, 0.0)  # explicit atol adds an element-wise check


def test_judge_fp32_and_int8() -> None:
    p = Policy()
    good = {"min_atol": 5e-5, "max_abs": 5e-5, "cosine": 1.0, "top1": 1.0, "new_nonfinite": 0}
    assert p.judge(good, "fp32", "y") == []
    bad = {**good, "min_atol": 0.2, "max_abs": 0.2}
    assert "needs atol >= 0.2" in p.judge(bad, "fp32", "y")[0]
    assert p.judge(bad, "int8", "y") == []  # int8 ignores element-wise error by default
    assert len(p.judge({**bad, "cosine": 0.9, "top1": 0.5}, "int8", "y")) == 2
    assert "NaN/Inf" in p.judge({**good, "new_nonfinite": 3}, "fp32", "y")[0]


def test_parse_tolerance_override() -> None:
    assert parse_tolerance_override("logits=1e-3,1e-2") == ("logits", Tolerance(1e-3, 1e-2))
    assert parse_tolerance_override("y=0.5") == ("y", Tolerance(0.5, 1e-3))
    for bad in ("logits", "=1", "y=a", "y=1,2,3", "y=-1"):
        with pytest.raises(UsageError):
            parse_tolerance_override(bad)
