"""The ONNX GRU op (gates z,r,h): every direction, both ``linear_before_reset`` forms, with and without an
initial state, against onnxruntime, through the fused kernel or scripted loop (fx, TorchScript) and through
the scan that torch.export uses; and a PyTorch ``nn.GRU`` exported to ONNX, as its users do."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import onnx
import pytest
import torch
from onnx_torch_helpers import assert_same, check_model, node_model, rand, run_ort, run_torch

from fwx.converters.onnx_torch.translate import translate
from fwx.errors import UnsupportedOpsError

H, IN = 5, 3


def _gru(
    direction: str, with_state: bool, lbr: int, t: int = 4, b: int = 2, layout: int = 0
) -> tuple[onnx.ModelProto, dict[str, Any]]:
    d = 2 if direction == "bidirectional" else 1
    feeds = {"x": rand(t, b, IN, seed=1)}
    if with_state:
        feeds |= {"h0": rand(d, b, H, seed=2)}
    consts = {"w": rand(d, 3 * H, IN, seed=4), "r": rand(d, 3 * H, H, seed=5), "bias": rand(d, 6 * H, seed=6)}
    order = ["x", "w", "r", "bias", "", *(["h0"] if with_state else [])]
    dims = {"x": ["t", "b", IN], "h0": [d, "b", H]}
    if layout:
        feeds = {k: np.ascontiguousarray(v.swapaxes(0, 1)) for k, v in feeds.items()}
        dims = {"x": ["b", "t", IN], "h0": ["b", d, H]}
    model = node_model(
        "GRU",
        feeds,
        consts=consts,
        input_order=order,
        outputs=["y", "yh"],
        opset=14,
        dims={k: v for k, v in dims.items() if k in feeds},
        direction=direction,
        hidden_size=H,
        layout=layout,
        linear_before_reset=lbr,
    )
    return model, feeds


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("with_state", [False, True])
def test_gru_matches_onnxruntime(direction: str, lbr: int, with_state: bool) -> None:
    model, feeds = _gru(direction, with_state, lbr)
    _, other = _gru(direction, with_state, lbr, t=7, b=3)
    check_model(model, feeds, others=[other])


def test_gru_batch_major_layout() -> None:
    """onnxruntime has no layout=1 kernel, so compare with the time-major model on transposed tensors."""
    ref_model, ref_feeds = _gru("bidirectional", True, 1)
    model, feeds = _gru("bidirectional", True, 1, layout=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(translate(model, feeds))
    y, yh = run_torch(scripted, feeds)
    ry, ryh = run_ort(ref_model, ref_feeds)
    assert_same([y, yh], [ry.transpose(2, 0, 1, 3), ryh.swapaxes(0, 1)])


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_scan_path_under_export_keeps_time_dynamic(lbr: int) -> None:
    model, feeds = _gru("bidirectional", True, lbr)
    gm = translate(model, feeds)
    t, b = torch.export.Dim("t"), torch.export.Dim("b")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(
            gm, tuple(torch.from_numpy(v) for v in feeds.values()), dynamic_shapes=({0: t, 1: b}, {1: b})
        )
    assert "scan" in ep.graph_module.code
    for tt, bb in ((4, 2), (9, 3), (1, 1)):
        _, other = _gru("bidirectional", True, lbr, t=tt, b=bb)
        assert_same(run_torch(ep.module(), other), run_ort(model, other), f"export t={tt} b={bb}")


def test_a_pytorch_gru_exported_to_onnx_translates(tmp_path: Any) -> None:
    """``nn.GRU(batch_first=True, bidirectional=True)`` through the legacy exporter (``linear_before_reset=1``)."""
    torch.manual_seed(0)
    gru = torch.nn.GRU(IN, H, batch_first=True, bidirectional=True).eval()
    path = tmp_path / "gru.onnx"
    x = torch.randn(2, 6, IN)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            gru, (x,), str(path), input_names=["x"], output_names=["y", "h"],
            dynamic_axes={"x": {0: "b", 1: "t"}}, opset_version=17, dynamo=False,
        )  # fmt: skip
    model = onnx.load(str(path))
    assert [n.op_type for n in model.graph.node if n.op_type == "GRU"] == ["GRU"]
    check_model(model, {"x": x.numpy()}, others=[{"x": torch.randn(3, 9, IN).numpy()}])


def test_gru_with_sequence_lens_is_refused() -> None:
    model, feeds = _gru("forward", False, 1)
    model.graph.node[0].input[4] = "lens"
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array([4, 4], np.int32), "lens"))
    with pytest.raises(UnsupportedOpsError, match=r"GRU\(sequence_lens\)"):
        translate(model, feeds)
