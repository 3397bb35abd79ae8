"""``aten::diff`` and bool ``aten::cumsum`` through the TorchScript-based ONNX exporter (GPT-2's mask helpers use it; issue 12)."""

from __future__ import annotations

import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")


class _Diffs(torch.nn.Module):
    def forward(self, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        # prepend (as masking_utils does), a plain float diff on the other axis, and the helpers' bool cumsum
        d = torch.diff(p, dim=-1, prepend=p[:, :1] - 1)
        return d, torch.diff(p.float(), dim=0), (d != 1).cumsum(-1), p.cumsum(0, dtype=torch.float32)


def test_diff_exports_and_matches_at_two_sizes() -> None:
    from fwx.converters import torch_symbolics

    torch_symbolics.register(17)
    f = io.BytesIO()
    sample = torch.randint(0, 9, (3, 6), generator=torch.Generator().manual_seed(0))
    torch.onnx.export(
        _Diffs(), (sample,), f, dynamo=False, opset_version=17, input_names=["p"], dynamic_axes={"p": {0: "b", 1: "s"}}
    )
    session = ort.InferenceSession(f.getvalue())
    for p in (sample, torch.randint(0, 9, (5, 9), generator=torch.Generator().manual_seed(1))):
        got = session.run(None, {"p": p.numpy()})
        for g, want in zip(got, _Diffs()(p), strict=True):
            np.testing.assert_array_equal(g, want.numpy())


def test_diff_with_n_other_than_one_is_still_refused() -> None:
    from fwx.converters import torch_symbolics

    torch_symbolics.register(17)

    class Twice(torch.nn.Module):
        def forward(self, p: torch.Tensor) -> torch.Tensor:
            return torch.diff(p, n=2)

    with pytest.raises(Exception, match="diff"):
        torch.onnx.export(Twice(), (torch.zeros(2, 5),), io.BytesIO(), dynamo=False, opset_version=17)
