"""``--eval-holdout FRACTION``: where the budget's samples are cut into searched and held out.

Half by default. More held out resolves the reported cost more finely (one
sample is 100/held points); less leaves the search more samples to choose on.
The fraction asked goes to fwx.json with the sizes it came to and the seed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from fwx.cli import cli
from fwx.errors import UsageError
from fwx.formats import Format
from fwx.quantize.options import QuantOptions, check_options, quant_options
from fwx.quantize.split import HOLDOUT_FRACTION, SPLIT_SEED, split
from tests.quantize.conftest import SIGNATURE, Digits


def test_the_fraction_moves_the_cut_and_is_recorded() -> None:
    s = split(450, 0.3)
    assert (len(s.search), len(s.holdout)) == (315, 135)
    assert s.to_json() == {"seed": SPLIT_SEED, "search_samples": 315, "holdout_samples": 135, "holdout_fraction": 0.3}
    assert split(450).to_json()["holdout_fraction"] == HOLDOUT_FRACTION
    assert set(split(450, 0.3).holdout) != set(split(450, 0.7).holdout)
    assert QuantOptions("int8").holdout_fraction == HOLDOUT_FRACTION


@pytest.mark.parametrize("fraction", [0, 1, 1.5, -0.2])
def test_a_fraction_that_leaves_a_part_empty_is_refused(fraction: float) -> None:
    with pytest.raises(UsageError, match=r"--eval-holdout must be a fraction between 0 and 1"):
        QuantOptions("int8", max_drop=0.5, eval_holdout=fraction)


def test_eval_holdout_needs_a_budget_and_quantize(digits: Digits) -> None:
    q = QuantOptions("int8", calibration_data=str(digits.calib), eval_data=str(digits.eval), eval_holdout=0.3)
    with pytest.raises(UsageError, match="no budget was given"):
        check_options(Format.ONNX, q)
    with pytest.raises(UsageError, match="--eval-holdout needs --quantize"):
        quant_options(None, eval_holdout=0.3)


def test_the_cli_option_is_in_the_budget_section_and_range_checked() -> None:
    text = CliRunner().invoke(cli, ["export", "--help"], terminal_width=100).output
    budget = text.split("Accuracy budget (int8):", 1)[1].split("Other options:", 1)[0]
    assert "--eval-holdout FRACTION" in budget
    res = CliRunner().invoke(cli, ["export", "m.onnx", "--quantize", "int8", "--eval-holdout", "1"])
    assert res.exit_code == 2
    assert "--eval-holdout" in res.output


def test_onnx_budget_reports_on_the_fraction_held_out(digits: Digits, tmp_path: Path) -> None:
    from fwx.quantize.onnx import quantize_onnx

    opts = QuantOptions(
        "int8", calibration_data=str(digits.calib), eval_data=str(digits.eval), max_drop=0.5, eval_holdout=0.3
    )
    info = quantize_onnx(digits.onnx, tmp_path / "q.onnx", SIGNATURE, opts)
    b = info.budget
    assert b is not None
    s = split(len(digits.y_test), 0.3)
    assert b.split == {
        "seed": SPLIT_SEED,
        "search_samples": len(s.search),
        "holdout_samples": len(s.holdout),
        "holdout_fraction": 0.3,
    }
    assert b.plain["samples"] == len(s.search)
    assert b.holdout["plain"]["samples"] == len(s.holdout)
    assert info.eval is not None
    assert info.eval.samples == len(s.holdout)  # the receipt's top-1 is the held-out part too
