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


class _Bags(torch.nn.Module):
    """Recommender-style pooled id features: 1-D ids with offsets, and fixed-size 2-D bags."""

    def __init__(self, mode: str, **kw: object) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.bags = torch.nn.EmbeddingBag(50, 4, mode=mode, **kw)  # type: ignore[arg-type]

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        psw = weights if self.bags.mode == "sum" else None
        return self.bags(ids, offsets, per_sample_weights=psw)


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")  # torch's own checks of per_sample_weights
@pytest.mark.parametrize("opset", [11, 13, 17])
@pytest.mark.parametrize(
    ("mode", "kw"),
    [("sum", {}), ("mean", {}), ("mean", {"padding_idx": 0}), ("sum", {"include_last_offset": True})],
    ids=["sum", "mean", "mean-padding", "sum-last-offset"],
)
def test_embedding_bag_exports_without_a_loop_and_matches(opset: int, mode: str, kw: dict[str, object]) -> None:
    """The stock symbolic is an ONNX ``Loop`` over the bags, which no ONNX translator and no TFLite builtin
    takes; fwx's is a bag-by-index one-hot times the gathered rows. Checked at other counts of ids and bags,
    with an empty bag, the padding row and per-sample weights."""
    import onnx

    from fwx.converters import torch_symbolics

    torch_symbolics.register(opset)
    model = _Bags(mode, **kw).eval()
    last = bool(kw.get("include_last_offset"))
    ids, offsets = torch.tensor([3, 0, 7, 7, 1, 0, 9]), torch.tensor([0, 2, 2, 5] + ([7] if last else []))
    f = io.BytesIO()
    torch.onnx.export(
        model,
        (ids, offsets, torch.rand(7)),
        f,
        dynamo=False,
        opset_version=opset,
        input_names=["ids", "offsets", "weights"],
        dynamic_axes={"ids": {0: "n"}, "offsets": {0: "b"}, "weights": {0: "n"}},
    )
    assert "Loop" not in {n.op_type for n in onnx.load_from_string(f.getvalue()).graph.node}
    session = ort.InferenceSession(f.getvalue())
    cases = [
        (ids, offsets),
        (torch.tensor([4, 0, 0, 2, 8, 8, 8, 1, 3, 0, 5]), torch.tensor([0, 1, 6] + ([11] if last else []))),
    ]
    for i, o in cases:
        w = torch.rand(len(i), generator=torch.Generator().manual_seed(len(i)))
        feeds = {"ids": i.numpy(), "offsets": o.numpy(), "weights": w.numpy()}
        want = model(i, o, w).detach().numpy()
        np.testing.assert_allclose(
            session.run(None, {k: v for k, v in feeds.items() if k in {x.name for x in session.get_inputs()}})[0],
            want,
            atol=1e-6,
        )
