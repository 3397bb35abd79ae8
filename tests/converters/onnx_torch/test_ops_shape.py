"""Shape and data-movement ops against onnxruntime, attribute and input forms, negative axes,
and at a second input size to prove sizes are not baked."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper
from onnx_torch_helpers import check_model, graph_model, node_model, rand

I64 = np.int64
X = rand(2, 3, 4)
X_OTHER = rand(5, 3, 6)
DYN = {"x": ["n", 3, "w"]}


def _c(*v: int) -> np.ndarray:
    return np.array(v, dtype=I64)


@pytest.mark.parametrize(("attrs", "opset"), [({}, 13), ({"start": 1}, 15), ({"start": -2, "end": -1}, 15)])
def test_shape(attrs: dict[str, Any], opset: int) -> None:
    check_model(node_model("Shape", {"x": X}, opset=opset, dims=DYN, **attrs), {"x": X}, others=[{"x": X_OTHER}])


def test_size() -> None:
    check_model(node_model("Size", {"x": X}, dims=DYN), {"x": X}, others=[{"x": X_OTHER}])


@pytest.mark.parametrize(
    ("shape", "opset", "allowzero"),
    [
        (_c(0, -1), 13, 0),
        (_c(-1, 3, 2, 2), 13, 0),
        (_c(2, 0, 2, 2), 14, 0),
        (_c(6, 4), 14, 1),
    ],
)
def test_reshape_const(shape: np.ndarray, opset: int, allowzero: int) -> None:
    kw = {"allowzero": allowzero} if opset >= 14 else {}
    check_model(node_model("Reshape", {"x": X}, consts={"s": shape}, opset=opset, **kw), {"x": X})


def test_reduce_prod_of_shape_stays_symbolic() -> None:
    """tf2onnx's Tensordot: Reshape(x, [ReduceProd(Shape(x)[:2]), -1]); a Keras BiLSTM's Dense head emits it.

    Folded as int arithmetic on sizes (no tensor value read), so ``torch.export`` keeps the dims dynamic."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "two", "zero"], ["lead"]),
        helper.make_node("ReduceProd", ["lead"], ["rows"], keepdims=1),
        helper.make_node("Concat", ["rows", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    consts = {"zero": _c(0), "two": _c(2), "minus1": _c(-1)}
    model = graph_model(nodes, {"x": X}, consts=consts, dims=DYN, opset=17)
    gm = check_model(model, {"x": X}, others=[{"x": X_OTHER}])
    assert "reduce_prod" not in gm.code  # sizes multiplied as ints, no tensor value read back


def test_reshape_from_shape_chain_stays_dynamic() -> None:
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape: the torch exporters' batch-flatten pattern."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    consts = {"zero": np.array(0, I64), "ax0": _c(0), "minus1": _c(-1)}
    model = graph_model(nodes, {"x": X}, consts=consts, dims=DYN)
    gm = check_model(model, {"x": X}, others=[{"x": X_OTHER}])
    assert "x.size(0)" in gm.code
    assert "ints_to_tensor" not in gm.code


def test_expand_where_equal_minus_one_chain() -> None:
    """The legacy exporter's ``Expand(x, Where(Equal(shape, -1), 1, shape))`` folds to sizes, not tensors."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Equal", ["s", "m1"], ["eq"]),
        helper.make_node("Where", ["eq", "ones", "s"], ["target"]),
        helper.make_node("Expand", ["b", "target"], ["y"]),
    ]
    consts = {"m1": _c(-1, -1, -1), "ones": _c(1, 1, 1), "b": rand(1, 3, 1, seed=3)}
    gm = check_model(graph_model(nodes, {"x": X}, consts=consts, dims=DYN), {"x": X}, others=[{"x": X_OTHER}])
    assert "ints_to_tensor" not in gm.code


@pytest.mark.parametrize("axis", [0, 2, -1])
def test_flatten(axis: int) -> None:
    check_model(node_model("Flatten", {"x": X}, dims=DYN, axis=axis), {"x": X}, others=[{"x": X_OTHER}])


def test_squeeze_unsqueeze_attr_and_input_forms() -> None:
    x = rand(2, 1, 4, 1)
    check_model(node_model("Squeeze", {"x": x}, opset=11, axes=[-1, 1]), {"x": x})
    check_model(node_model("Squeeze", {"x": x}, consts={"a": _c(-3)}, opset=13), {"x": x})
    check_model(node_model("Squeeze", {"x": x}, opset=13), {"x": x})
    check_model(node_model("Unsqueeze", {"x": X}, opset=11, axes=[0, -1]), {"x": X})
    check_model(node_model("Unsqueeze", {"x": X}, consts={"a": _c(1, -1)}, opset=13), {"x": X})


def test_concat_negative_axis() -> None:
    feeds = {"a": rand(2, 3, 1), "b": rand(2, 3, 4, seed=1)}
    check_model(node_model("Concat", feeds, axis=-1), feeds)


@pytest.mark.parametrize("shape", [_c(2, 1, 4), _c(3, 1), _c(1, 1, 1, 1)])
def test_expand_bidirectional(shape: np.ndarray) -> None:
    x = rand(3, 1)
    check_model(node_model("Expand", {"x": x}, consts={"s": shape}), {"x": x})


def test_tile_and_constant_of_shape_and_range() -> None:
    check_model(node_model("Tile", {"x": X}, consts={"r": _c(1, 2, 3)}), {"x": X})
    cos = helper.make_tensor("v", 7, [1], [5])
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("ConstantOfShape", ["s"], ["y"], value=cos)]
    check_model(graph_model(nodes, {"x": X}, dims=DYN), {"x": X}, others=[{"x": X_OTHER}])
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i"], ["n"]),
        helper.make_node("Range", ["z", "n", "one"], ["y"]),
    ]
    consts = {"i": np.array(-1, I64), "z": np.array(0, I64), "one": np.array(2, I64)}
    check_model(graph_model(nodes, {"x": X}, consts=consts, dims=DYN), {"x": X}, others=[{"x": X_OTHER}])
    consts = {"a": np.float32(0.5), "b": np.float32(3.0), "d": np.float32(0.7)}
    check_model(graph_model([helper.make_node("Range", ["a", "b", "d"], ["y"])], {}, consts=consts), {})


@pytest.mark.parametrize("perm", [None, [1, 0, 2], [2, 0, 1]])
def test_transpose(perm: list[int] | None) -> None:
    kw = {"perm": perm} if perm else {}
    check_model(node_model("Transpose", {"x": X}, **kw), {"x": X})


@pytest.mark.parametrize(
    ("idx", "axis"),
    [(np.array(1, I64), 0), (np.array(-1, I64), 2), (_c(2, -1, 0), 1), (np.array([[0, 1], [-1, 0]], I64), -1)],
)
def test_gather(idx: np.ndarray, axis: int) -> None:
    check_model(node_model("Gather", {"x": X}, consts={"i": idx}, axis=axis), {"x": X})


def test_gather_runtime_indices_into_table() -> None:
    table, ids = rand(10, 4), np.array([[1, 9, -2], [0, 3, 3]], dtype=I64)
    check_model(node_model("Gather", {"ids": ids}, consts={"t": table}, input_order=["t", "ids"]), {"ids": ids})


@pytest.mark.parametrize(
    ("data_shape", "idx", "batch_dims"),
    [
        ((2, 3, 4), [[0, 1], [1, 2], [-1, 0]], 0),  # k=2 of 3 axes: rows of the last axis (negative wraps)
        ((2, 3, 4), [[1], [0]], 0),  # k=1: whole slabs
        ((2, 3, 4), [[[0, 1]], [[2, 3]]], 1),  # batch_dims=1: each batch row picks its own
    ],
)
def test_gather_nd(data_shape: tuple[int, ...], idx: list[Any], batch_dims: int) -> None:
    x = rand(*data_shape)
    check_model(
        node_model("GatherND", {"x": x}, consts={"i": np.array(idx, dtype=I64)}, batch_dims=batch_dims), {"x": x}
    )


def test_gather_nd_runtime_indices() -> None:
    """Indices computed in the graph (GPT-2's dynamo export gathers a mask by batch and position ids)."""
    x = rand(3, 5)
    idx = np.array([[0, 4], [2, 1], [1, 3]], dtype=I64)
    check_model(node_model("GatherND", {"x": x, "i": idx}), {"x": x, "i": idx})


def test_gather_elements() -> None:
    idx = np.array([[[0], [2], [-1]]], dtype=I64).repeat(2, 0)
    check_model(node_model("GatherElements", {"x": X}, consts={"i": idx}, axis=1), {"x": X})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements(reduction: str) -> None:
    """Hugging Face BART's dynamo export scatters (``masked_fill`` on shifted decoder ids); negative indices wrap."""
    idx = np.array([[[0], [2], [-1]]], dtype=I64).repeat(2, 0)
    upd = rand(2, 3, 1, seed=3)
    model = node_model(
        "ScatterElements",
        {"x": X, "u": upd},
        consts={"i": idx},
        axis=1,
        reduction=reduction,
        input_order=["x", "i", "u"],
        opset=18,
    )
    check_model(model, {"x": X, "u": upd})


@pytest.mark.parametrize(
    ("data_shape", "idx", "reduction"),
    [
        ((4, 3), [[1], [3]], "none"),  # k=1: whole rows replaced
        ((2, 3, 4), [[0, 1], [1, -1]], "none"),  # k=2: rows of the last axis (negative wraps)
        ((2, 3, 4), [[0, 1, 2], [1, 0, 3]], "add"),  # k=3: single elements
        ((4, 3), [[2], [0]], "mul"),
        ((4, 3), [[2], [0]], "max"),
    ],
)
def test_scatter_nd(data_shape: tuple[int, ...], idx: list[Any], reduction: str) -> None:
    x = rand(*data_shape)
    ids = np.array(idx, dtype=I64)
    upd = rand(*ids.shape[:-1], *data_shape[ids.shape[-1] :], seed=5)
    model = node_model(
        "ScatterND", {"x": x, "u": upd}, consts={"i": ids}, reduction=reduction, input_order=["x", "i", "u"], opset=18
    )
    check_model(model, {"x": x, "u": upd})


def test_scatter_nd_runtime_indices_at_two_sizes() -> None:
    """Indices computed in the graph and a dynamic leading axis: nothing about the size is baked."""
    x, idx, upd = rand(5, 3), np.array([[4], [1]], dtype=I64), rand(2, 3, seed=7)
    model = node_model("ScatterND", {"x": x, "i": idx, "u": upd}, dims={"x": ["n", 3]})
    check_model(
        model, {"x": x, "i": idx, "u": upd}, others=[{"x": rand(7, 3), "i": np.array([[6], [0]], dtype=I64), "u": upd}]
    )


@pytest.mark.parametrize(
    ("starts", "ends", "axes", "steps"),
    [
        (_c(1), _c(9223372036854775807), _c(-1), _c(1)),
        (_c(-2, 0), _c(-1, 3), _c(1, 2), _c(1, 2)),
        (_c(-1), _c(-9223372036854775807), _c(2), _c(-1)),
        (_c(2), _c(0), _c(1), _c(-2)),
    ],
)
def test_slice_inputs(starts: np.ndarray, ends: np.ndarray, axes: np.ndarray, steps: np.ndarray) -> None:
    consts = {"s": starts, "e": ends, "a": axes, "p": steps}
    check_model(node_model("Slice", {"x": X}, consts=consts, dims=DYN), {"x": X}, others=[{"x": X_OTHER}])


def test_slice_opset9_attrs() -> None:
    check_model(node_model("Slice", {"x": X}, opset=9, starts=[0, 1], ends=[1, 100], axes=[0, 2]), {"x": X})


def test_split_forms() -> None:
    x = rand(2, 7, 3)
    check_model(node_model("Split", {"x": x}, outputs=["a", "b"], opset=11, axis=1, split=[3, 4]), {"x": x})
    check_model(node_model("Split", {"x": x}, consts={"s": _c(5, 2)}, outputs=["a", "b"], opset=13, axis=-2), {"x": x})
    check_model(node_model("Split", {"x": x}, outputs=["a", "b", "c"], opset=18, axis=1, num_outputs=3), {"x": x})


@pytest.mark.parametrize(
    ("mode", "pads", "opset"),
    [
        ("constant", _c(0, 1, 2, 0, 2, 1), 13),
        ("reflect", _c(0, 0, 1, 0, 0, 2), 13),
        ("edge", _c(0, 1, 1, 0, 1, 1), 13),
    ],
)
def test_pad(mode: str, pads: np.ndarray, opset: int) -> None:
    consts: dict[str, np.ndarray] = {"p": pads}
    if mode == "constant":
        consts["v"] = np.array(1.5, np.float32)
    check_model(node_model("Pad", {"x": X}, consts=consts, opset=opset, mode=mode), {"x": X})


def test_pad_axes_opset18_and_attr_form() -> None:
    consts = {"p": _c(1, 2), "v": np.array(0.0, np.float32), "a": _c(-1)}
    check_model(node_model("Pad", {"x": X}, consts=consts, opset=18), {"x": X})
    check_model(node_model("Pad", {"x": X}, opset=9, pads=[0, 0, 1, 0, 0, 1], value=2.0), {"x": X})


def test_identity_dropout_constant_einsum_cumsum_trilu() -> None:
    check_model(node_model("Identity", {"x": X}), {"x": X})
    check_model(node_model("Dropout", {"x": X}, opset=13, outputs=["y", "mask"]), {"x": X})
    const = helper.make_node("Constant", [], ["c"], value_floats=[1.0, 2.0, 3.0, 4.0])
    check_model(graph_model([const, helper.make_node("Add", ["x", "c"], ["y"])], {"x": X}), {"x": X})
    feeds = {"a": rand(2, 3, 4), "b": rand(2, 4, 5, seed=1)}
    check_model(node_model("Einsum", feeds, equation="bij,bjk->bik"), feeds)
    for exclusive, reverse in ((0, 0), (1, 0), (0, 1), (1, 1)):
        check_model(
            node_model("CumSum", {"x": X}, consts={"a": np.array(-1, I64)}, exclusive=exclusive, reverse=reverse),
            {"x": X},
        )
    check_model(node_model("Trilu", {"x": X}, consts={"k": np.array(1, I64)}, opset=14, upper=0), {"x": X})


def test_input_names_that_shadow_globals_or_are_not_identifiers() -> None:
    feeds = {"torch": rand(2, 3), "input:0": rand(2, 3, seed=1), "max": rand(3, seed=2)}
    nodes = [helper.make_node("Add", ["torch", "input:0"], ["a"]), helper.make_node("Mul", ["a", "max"], ["y"])]
    check_model(graph_model(nodes, feeds), feeds)


@pytest.mark.parametrize(("largest", "axis"), [(1, -1), (0, 1)])
def test_topk(largest: int, axis: int) -> None:
    check_model(
        node_model("TopK", {"x": X}, consts={"k": _c(2)}, outputs=["v", "i"], opset=11, largest=largest, axis=axis),
        {"x": X},
    )


@pytest.mark.parametrize(("op_type", "bound"), [("Max", 1), ("Min", 64)])
def test_max_min_of_shapes_stays_symbolic_under_torch_export(op_type: str, bound: int) -> None:
    """tf2onnx broadcasts two shapes with Max (Keras MultiHeadAttention): Reshape(x, [Max(Shape(x)[:2], c), -1]).

    As tensors, the sizes came back through ``.item()`` and ``torch.export`` failed with "Could not guard on
    data-dependent expression Eq(u0, 0)", so a Keras Transformer reached every format but ``.pt2``."""
    import torch

    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "two", "zero"], ["lead"]),
        helper.make_node(op_type, ["lead", "floor"], ["sizes"]),
        helper.make_node("Concat", ["sizes", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    consts = {"zero": _c(0), "two": _c(2), "floor": _c(bound, 3), "minus1": _c(-1)}  # leaves [n, 3] as it is
    model = graph_model(nodes, {"x": X}, consts=consts, dims=DYN, opset=17)
    gm = check_model(model, {"x": X}, others=[{"x": X_OTHER}])
    assert "ints_to_tensor" not in gm.code  # sizes, not tensors
    assert "maximum" not in gm.code
    if op_type == "Min":
        return  # torch.export cannot prove min(64, n) == n within n's range: a guard it refuses, not ours
    n, w = torch.export.Dim("n", min=2, max=64), torch.export.Dim("w", min=2, max=64)
    ep = torch.export.export(gm, (torch.from_numpy(X),), dynamic_shapes=({0: n, 2: w},))
    got = ep.module()(torch.from_numpy(X_OTHER)).numpy()
    assert got.shape == (5, 3, 6)
    assert np.allclose(got, X_OTHER)


def test_pads_computed_from_shapes_stay_symbolic_under_torch_export() -> None:
    """tf2onnx's Keras ``Conv1DTranspose(padding="same")`` over a dynamic length crops and pads by amounts it
    computes from shapes: ``Split`` of a shape vector and ``Neg`` of a size difference. As tensors they came
    back through ``.item()`` and ``torch.export`` failed on a data-dependent guard."""
    import torch

    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "two", "three", "zero"], ["w"]),  # [w]
        helper.make_node("Sub", ["w", "want"], ["excess"]),  # w - 4
        helper.make_node("Neg", ["excess"], ["short"]),  # 4 - w
        helper.make_node("Max", ["short", "zero"], ["grow"]),
        helper.make_node("Concat", ["zero", "zero", "zero", "zero", "zero", "grow"], ["pads6"], axis=0),
        helper.make_node("Split", ["pads6"], ["p0", "p1", "p2", "p3", "p4", "p5"], axis=0),
        helper.make_node("Concat", ["p0", "p1", "p2", "p3", "p4", "p5"], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads"], ["y"]),
    ]
    consts = {"zero": _c(0), "two": _c(2), "three": _c(3), "want": _c(9)}
    model = graph_model(nodes, {"x": X}, consts=consts, dims=DYN, opset=17)
    gm = check_model(model, {"x": X}, others=[{"x": X_OTHER}])
    assert "ints_to_tensor" not in gm.code
    assert "tensor_to_int" not in gm.code
    n, w = torch.export.Dim("n", min=2, max=64), torch.export.Dim("w", min=2, max=8)
    ep = torch.export.export(gm, (torch.from_numpy(X),), dynamic_shapes=({0: n, 2: w},))
    got = ep.module()(torch.from_numpy(X_OTHER)).numpy()
    assert got.shape == (X_OTHER.shape[0], 3, 9)
    assert np.allclose(got[:, :, : X_OTHER.shape[2]], X_OTHER)
