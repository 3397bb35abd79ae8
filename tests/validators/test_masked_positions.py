"""A mismatch at positions the model masks out never fails validation; one at an attended position does."""

from __future__ import annotations

from typing import Any

import pytest

from fwx.signature import Signature, TensorSpec
from fwx.sources.samples import InputConfig, generate_inputs
from fwx.validators import validate_runtimes

torch = pytest.importorskip("torch")

from fwx.runtimes.eager_torch import EagerTorchRuntime  # noqa: E402 - needs torch

SIG = Signature(
    (TensorSpec("input_ids", "int64", ("N", "S")), TensorSpec("attention_mask", "int64", ("N", "S"))),
    (TensorSpec("h", "float32", ("N", "S", 4)),),
)


class Tokens(torch.nn.Module):
    """Per-token states; ``garbage`` changes them only where the mask is 0 (``shift``: everywhere)."""

    def __init__(self, garbage: float = 0.0, shift: float = 0.0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(10, 4)
        self.garbage, self.shift = garbage, shift

    def forward(self, input_ids: Any, attention_mask: Any) -> Any:
        h = self.emb(input_ids) + self.shift
        return h + self.garbage * (1 - attention_mask.unsqueeze(-1).to(h.dtype))


SAMPLES = generate_inputs(SIG, InputConfig(samples=4))


def _report(cand: Tokens) -> Any:
    ref = EagerTorchRuntime.from_module(Tokens().eval(), SIG)
    return validate_runtimes(
        ref, {"cand": EagerTorchRuntime.from_module(cand.eval(), SIG)}, signature=SIG, inputs=SAMPLES
    )


def test_differences_at_padding_do_not_fail() -> None:
    assert any((s["attention_mask"] == 0).any() for s in SAMPLES)  # the generated masks do pad
    report = _report(Tokens(garbage=0.745))
    assert report.passed, report.failures()


def test_differences_where_the_model_attends_still_fail() -> None:
    assert not _report(Tokens(shift=0.745)).passed
