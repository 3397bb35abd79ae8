"""The ONNX LSTM op (gates i,o,f,c): every direction, with and without initial states, against onnxruntime,
through the fused kernel (fx, TorchScript) and through the scan that torch.export uses."""

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


def _lstm(
    direction: str, with_state: bool, t: int = 4, b: int = 2, layout: int = 0
) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """A one-node LSTM model and time-major (layout 0) feeds."""
    d = 2 if direction == "bidirectional" else 1
    feeds = {"x": rand(t, b, IN, seed=1)}
    if with_state:
        feeds |= {"h0": rand(d, b, H, seed=2), "c0": rand(d, b, H, seed=3)}
    consts = {"w": rand(d, 4 * H, IN, seed=4), "r": rand(d, 4 * H, H, seed=5), "bias": rand(d, 8 * H, seed=6)}
    order = ["x", "w", "r", "bias", "", *(["h0", "c0"] if with_state else [])]
    dims = {"x": ["t", "b", IN], "h0": [d, "b", H], "c0": [d, "b", H]}
    if layout:
        feeds = {k: np.ascontiguousarray(v.swapaxes(0, 1)) for k, v in feeds.items()}
        dims = {"x": ["b", "t", IN], "h0": ["b", d, H], "c0": ["b", d, H]}
    model = node_model(
        "LSTM",
        feeds,
        consts=consts,
        input_order=order,
        outputs=["y", "yh", "yc"],
        opset=14,
        dims={k: v for k, v in dims.items() if k in feeds},
        direction=direction,
        hidden_size=H,
        layout=layout,
    )
    return model, feeds


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("with_state", [False, True])
def test_lstm_matches_onnxruntime(direction: str, with_state: bool) -> None:
    model, feeds = _lstm(direction, with_state)
    _, other = _lstm(direction, with_state, t=7, b=3)
    check_model(model, feeds, others=[other])


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_lstm_batch_major_layout(direction: str) -> None:
    """onnxruntime has no layout=1 kernel, so compare with the time-major model on transposed tensors."""
    ref_model, ref_feeds = _lstm(direction, with_state=True)
    model, feeds = _lstm(direction, with_state=True, layout=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TorchScript's note about fx's own __init__ annotations
        scripted = torch.jit.script(translate(model, feeds))
    y, yh, yc = run_torch(scripted, feeds)
    ry, ryh, ryc = run_ort(ref_model, ref_feeds)
    assert_same([y, yh, yc], [ry.transpose(2, 0, 1, 3), ryh.swapaxes(0, 1), ryc.swapaxes(0, 1)])


@pytest.mark.slow
def test_lstm_scan_path_under_export_keeps_time_dynamic() -> None:
    model, feeds = _lstm("bidirectional", with_state=True)
    gm = translate(model, feeds)
    t, b = torch.export.Dim("t"), torch.export.Dim("b")
    shapes = ({0: t, 1: b}, {1: b}, {1: b})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(gm, tuple(torch.from_numpy(v) for v in feeds.values()), dynamic_shapes=shapes)
    assert "scan" in ep.graph_module.code
    for tt, bb in ((4, 2), (9, 3), (1, 1)):
        _, other = _lstm("bidirectional", with_state=True, t=tt, b=bb)
        assert_same(run_torch(ep.module(), other), run_ort(model, other), f"export t={tt} b={bb}")


def test_lstm_with_peepholes_is_refused() -> None:
    model, feeds = _lstm("forward", with_state=False)
    model.graph.node[0].input.extend(["", "", "p"])
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.ones((1, 3 * H), np.float32), "p"))
    with pytest.raises(UnsupportedOpsError, match=r"LSTM\(peepholes\)"):
        translate(model, feeds)
