"""Tolerance policy: defaults per precision, overrides, int8 rules, --tolerance parsing."""

from __future__ import annotations

import pytest

from fwx.errors import UsageError
from fwx.validators.policy import Policy, Tolerance, parse_tolerance_override, precision_class


def test_defaults_by_precision() -> None:
    p = Policy()
    assert p.tolerance("fp32", "y") == Tolerance(1e-4, 1e-3, scaled=True)
    assert p.tolerance("float16", "y") == Tolerance(1e-2, 1e-2, scaled=True)
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


def test_a_default_atol_grows_with_the_outputs_magnitude_and_a_users_does_not() -> None:
    """torchvision's EfficientNet-B0 at 64x64: logits up to 37.5, 2.3e-4 apart between correct runtimes
    (6e-6 of the range) at a logit near 0; the absolute 1e-4 failed it, 1e-4 per unit of 37.5 passes."""
    p = Policy()
    m = {"min_atol": 1.56e-4, "max_abs": 2.3e-4, "new_nonfinite": 0, "scale": 37.5}
    assert p.judge(m, "fp32", "logits") == []
    assert p.applied("fp32", "logits", m) == Tolerance(1e-4 * 37.5, 1e-3)
    assert p.judge({**m, "scale": 0.8}, "fp32", "logits")  # an output within [-1, 1]: 1e-4 absolute
    wrong = {**m, "min_atol": 0.5, "max_abs": 0.5}  # a real conversion error is of the output's own size
    assert "needs atol >= 0.5" in p.judge(wrong, "fp32", "logits")[0]
    for user in (Policy(atol=1e-4), Policy(per_output={"logits": Tolerance(1e-4, 1e-3)})):
        assert user.judge(m, "fp32", "logits"), "a tolerance the user gives is absolute"
    assert Policy(rtol=1e-2).applied("fp32", "logits", m) == Tolerance(1e-4 * 37.5, 1e-2)


def test_parse_tolerance_override() -> None:
    assert parse_tolerance_override("logits=1e-3,1e-2") == ("logits", Tolerance(1e-3, 1e-2))
    assert parse_tolerance_override("y=0.5") == ("y", Tolerance(0.5, 1e-3))
    for bad in ("logits", "=1", "y=a", "y=1,2,3", "y=-1"):
        with pytest.raises(UsageError):
            parse_tolerance_override(bad)
