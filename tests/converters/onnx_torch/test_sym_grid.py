"""Pads computed from shapes and moved as a grid stay sizes: the torch exporters' ``F.pad`` pattern.

``F.pad(x, [0, 0, 0, pad_w, 0, pad_h])`` with sizes computed from ``x.shape`` (a Swin's ``maybe_pad``)
exports as Concat -> Reshape ``[-1, 2]`` -> Slice (step -1) -> Transpose -> Reshape ``[-1]`` -> Cast ->
Pad. The translator kept small shape vectors symbolic only while 1-D: the ``[-1, 2]`` view became a
tensor, the pads came back through ``.item()`` and ``torch.export`` failed with
``GuardOnDataDependentSymNode ... u0``, so a Swin never reached ``.pt2`` from ONNX.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper
from onnx_torch_helpers import check_model, graph_model, rand

I64 = np.int64
X = rand(2, 5, 6, 3)  # [N, H, W, C], as Swin pads its hidden states
X_OTHER = rand(3, 7, 9, 3)
DYN = {"x": ["n", "h", "w", 3]}
WINDOW = 4


def _c(*v: int) -> np.ndarray:
    return np.array(v, dtype=I64)


def _pad_to_window(axis: int, name: str) -> list:  # type: ignore[type-arg]
    """``(WINDOW - size % WINDOW) % WINDOW`` of axis ``axis`` of x, as a 1-vector called ``name``."""
    return [
        helper.make_node("Gather", ["s", f"ax{axis}"], [f"{name}_size"], axis=0),
        helper.make_node("Mod", [f"{name}_size", "window"], [f"{name}_rem"]),
        helper.make_node("Sub", ["window", f"{name}_rem"], [f"{name}_short"]),
        helper.make_node("Mod", [f"{name}_short", "window"], [f"{name}_pad"]),
        helper.make_node("Unsqueeze", [f"{name}_pad", "zero"], [name]),
    ]


def _maybe_pad_model(opset: int = 17) -> object:
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        *_pad_to_window(1, "ph"),
        *_pad_to_window(2, "pw"),
        helper.make_node("Concat", ["zero", "zero", "zero", "pw", "zero", "ph"], ["torch_pads"], axis=0),
        helper.make_node(
            "ConstantOfShape", ["two"], ["rest"], value=helper.make_tensor("v", TensorProto.INT64, [1], [0])
        ),
        helper.make_node("Concat", ["torch_pads", "rest"], ["pads8"], axis=0),
        helper.make_node("Reshape", ["pads8", "pairs"], ["grid"]),  # [[0,0],[0,pw],[0,ph],[0,0]]
        helper.make_node("Slice", ["grid", "minus1", "to_start", "zero", "minus1"], ["reversed"]),
        helper.make_node("Transpose", ["reversed"], ["begins_ends"], perm=[1, 0]),
        helper.make_node("Reshape", ["begins_ends", "minus1"], ["flat"]),
        helper.make_node("Cast", ["flat"], ["pads"], to=TensorProto.INT64),
        helper.make_node("Pad", ["x", "pads"], ["y"]),
    ]
    consts = {
        "zero": _c(0),
        "two": _c(2),
        "minus1": _c(-1),
        "pairs": _c(-1, 2),
        "to_start": _c(-(2**63) + 1),
        "window": _c(WINDOW)[0],
        "ax1": _c(1)[0],
        "ax2": _c(2)[0],
    }
    return graph_model(nodes, {"x": X}, consts=consts, dims=DYN, opset=opset)


def test_pads_moved_as_a_grid_stay_sizes_under_torch_export() -> None:
    model = _maybe_pad_model()
    gm = check_model(model, {"x": X}, others=[{"x": X_OTHER}])  # type: ignore[arg-type]
    assert "ints_to_tensor" not in gm.code  # the pads are never a tensor...
    assert "tensor_to_int" not in gm.code  # ...so nothing is read back with .item()
    n, h, w = (torch.export.Dim(s, min=2, max=64) for s in "nhw")
    ep = torch.export.export(gm, (torch.from_numpy(X),), dynamic_shapes=({0: n, 1: h, 2: w},))
    got = ep.module()(torch.from_numpy(X_OTHER)).numpy()
    assert got.shape == (3, 8, 12, 3)
    assert np.allclose(got[:, :7, :9], X_OTHER)
    assert not got[:, 7:].any()
    assert not got[:, :, 9:].any()


def test_a_grid_that_reaches_a_tensor_op_is_built_in_its_shape() -> None:
    """Unsqueeze, Transpose, Gather and Squeeze move a shape's items as a grid; a tensor op (here Add with a
    runtime tensor) gets a tensor of the grid's shape, the items in their places."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Unsqueeze", ["s", "zero"], ["row"]),  # [[n, h, w, 3]]
        helper.make_node("Reshape", ["row", "pairs"], ["grid"]),  # [[n, h], [w, 3]]
        helper.make_node("Transpose", ["grid"], ["t"], perm=[1, 0]),  # [[n, w], [h, 3]]
        helper.make_node("Gather", ["t", "cols"], ["picked"], axis=1),  # [[w, n], [3, h]]
        helper.make_node("Unsqueeze", ["picked", "zero"], ["boxed"]),
        helper.make_node("Squeeze", ["boxed", "zero"], ["back"]),
        helper.make_node("Cast", ["back"], ["tf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["tf", "b"], ["y"]),
    ]
    b = rand(2, 2)
    consts = {"zero": _c(0), "pairs": _c(2, 2), "cols": _c(1, 0)}
    model = graph_model(nodes, {"x": X, "b": b}, consts=consts, dims=DYN)
    check_model(model, {"x": X, "b": b}, others=[{"x": X_OTHER, "b": b}])


@pytest.mark.slow
def test_a_swin_from_onnx_reaches_pt2_directly(tmp_path: Path) -> None:
    """Hugging Face's tiny Swin (64 px, window 4), dynamic batch: ``onnx -> pt2`` in one hop, validated."""
    pytest.importorskip("transformers")
    from fwx.exporter import ExportOptions, export
    from tests.exporter.test_onnx_pins_swin import swin_onnx

    src = swin_onnx(tmp_path / "swin.onnx", dynamic_hw=False)
    res = export(src, ["pt2"], ExportOptions(out=tmp_path / "repo"))
    assert res.manifest is not None
    entry = res.manifest.artifacts["pt2"]
    assert [(h["source"], h["target"]) for h in entry.hops] == [("onnx", "pt2")]  # not around through TF
    assert entry.validation["passed"], entry.validation
