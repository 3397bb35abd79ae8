"""Keras 3's ``GRU`` as one ONNX ``GRU`` node (tf2onnx recognises Keras 2's cell only).

tf2onnx turns a TF while loop whose body is a GRU cell it recognises into an
ONNX ``GRU``; its Keras pattern is Keras 2's (two bias inputs, ``BiasAdd`` and
``Split`` on both projections). Keras 3's ``GRUCell`` (``reset_after=True``,
the default) splits one ``(2, 3H)`` bias and slices the recurrent projection
with ``StridedSlice``, so tf2onnx writes a generic ONNX ``Loop``, which neither
of fwx's ONNX translators nor TFLite takes: a Keras GRU reached only SavedModel
and ONNX.

This rewriter walks back from the value the loop body writes each step and
checks every piece of the cell: ``h = z * h_prev + (1 - z) * tanh(x_h + r *
rec_h)`` with ``z``, ``r`` sigmoids of the input and recurrent parts of gates
z, r, h in that order (the recurrent slices start at 0, H and 2H). Only then
does it hand tf2onnx's own GRU builder the kernel, recurrent kernel and the two
bias rows. A body that differs in any way (a mask's ``Select``, another
activation) stays a ``Loop``, as before; validation judges the result either
way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: body-graph attribute carrying what the outer rewrite needs (indices of the loop's inputs)
_ATTR = "_fwx_keras3_gru"


def _one(nodes: list[Any], kind: str) -> Any:  # a node, or None
    found = [n for n in nodes if n is not None and n.type == kind]
    return found[0] if len(found) == 1 else None


def _through_identity(node: Any) -> Any:
    while node is not None and node.type == "Identity":
        node = node.inputs[0]
    return node


def _graph_input(g: Any, node: Any) -> int | None:
    node = _through_identity(node)
    if node is None or not node.is_graph_input():
        return None
    return int(g.input_names.index(node.output[0]))


def _slice_start(node: Any) -> int | None:
    """The start of a ``StridedSlice`` on its last axis (0 when that axis is masked to the start)."""
    if node is None or node.type != "StridedSlice" or not node.inputs[1].is_const():
        return None
    begin = node.inputs[1].get_tensor_value(as_list=True)
    axis = len(begin) - 1
    if int(node.get_attr_value("begin_mask", 0)) >> axis & 1:
        return 0
    return int(begin[axis])


def _match_body(g: Any) -> dict[str, int] | None:
    """Indices of the loop body's inputs for a Keras 3 GRU cell, or None if this body is not one."""
    for write in [n for n in g.get_nodes() if n.type == "TensorListSetItem"]:
        found = _match_cell(g, write)
        if found is not None:
            return found
    return None


def _match_cell(g: Any, write: Any) -> dict[str, int] | None:  # noqa: C901, PLR0911 - one check per piece
    cell = write.inputs[2]
    if cell.type not in ("Add", "AddV2") or not write.inputs[0].is_graph_input():
        return None
    muls = cell.inputs
    if len(muls) != 2 or any(m.type != "Mul" for m in muls):
        return None
    keep = next((m for m in muls if any(i.is_graph_input() for i in m.inputs)), None)
    cand = next((m for m in muls if m is not keep), None)
    if keep is None or cand is None:
        return None
    state = next(i for i in keep.inputs if i.is_graph_input())
    z = _one(keep.inputs, "Sigmoid")
    one_minus = _one(cand.inputs, "Sub")
    tanh = _one(cand.inputs, "Tanh")
    if z is None or one_minus is None or tanh is None or one_minus.inputs[1] is not z:
        return None
    if not one_minus.inputs[0].is_const() or float(one_minus.inputs[0].get_tensor_value()) != 1.0:
        return None
    pre = tanh.inputs[0]
    if pre.type not in ("Add", "AddV2"):
        return None
    r_mul = _one(pre.inputs, "Mul")
    x_h_split = _one(pre.inputs, "Split")
    if r_mul is None or x_h_split is None:
        return None
    r = _one(r_mul.inputs, "Sigmoid")
    rec_h = _one(r_mul.inputs, "StridedSlice")
    if r is None or rec_h is None or r is z:
        return None
    parts = {}
    for gate, sig in (("z", z), ("r", r)):
        add = sig.inputs[0]
        if add.type not in ("Add", "AddV2"):
            return None
        split, rec = _one(add.inputs, "Split"), _one(add.inputs, "StridedSlice")
        if split is not x_h_split or rec is None:
            return None
        parts[gate] = (add.input[add.inputs.index(split)], rec)
    if parts["z"][0] != x_h_split.output[0] or parts["r"][0] != x_h_split.output[1]:
        return None
    if pre.input[pre.inputs.index(x_h_split)] != x_h_split.output[2]:
        return None
    rec_add = rec_h.inputs[0]
    if any(p[1].inputs[0] is not rec_add for p in parts.values()) or rec_add.type not in ("Add", "AddV2"):
        return None
    h_start, r_start = _slice_start(rec_h), _slice_start(parts["r"][1])
    if h_start is None or r_start is None or _slice_start(parts["z"][1]) != 0 or r_start * 2 != h_start:
        return None
    # input side: Split(BiasAdd(MatMul(x_t, kernel), Squeeze(Split(bias)[0])))
    bias_add = x_h_split.inputs[1]
    if bias_add.type != "BiasAdd" or bias_add.inputs[0].type != "MatMul":
        return None
    x_mm = bias_add.inputs[0]
    if x_mm.inputs[0].type != "TensorListGetItem" or not x_mm.inputs[0].inputs[0].is_graph_input():
        return None
    # recurrent side: MatMul(h_prev, recurrent_kernel) + Squeeze(Split(bias)[1])
    h_mm = _one(rec_add.inputs, "MatMul")
    rec_bias = _one(rec_add.inputs, "Squeeze")
    in_bias = bias_add.inputs[1]
    if h_mm is None or rec_bias is None or in_bias.type != "Squeeze" or h_mm.inputs[0] is not state:
        return None
    bias_split = in_bias.inputs[0]
    if bias_split.type != "Split" or rec_bias.inputs[0] is not bias_split:
        return None
    if in_bias.input[0] != bias_split.output[0] or rec_bias.input[0] != bias_split.output[1]:
        return None
    found = {
        "x": _graph_input(g, x_mm.inputs[0].inputs[0]),
        "out": _graph_input(g, write.inputs[0]),
        "state": _graph_input(g, state),
        "kernel": _graph_input(g, x_mm.inputs[1]),
        "recurrent": _graph_input(g, h_mm.inputs[1]),
        "bias": _graph_input(g, bias_split.inputs[1]),
    }
    if any(v is None for v in found.values()):
        return None
    return {k: int(v) for k, v in found.items() if v is not None}


def rewrite(g: Any, ops: list[Any]) -> list[Any]:
    """tf2onnx rewriter: mark a Keras 3 GRU loop body; replace the loops whose bodies are marked."""
    from tf2onnx.graph_builder import GraphBuilder
    from tf2onnx.rewriter.gru_rewriter import GRUUnitRewriter
    from tf2onnx.rewriter.unit_rnn_rewriter_base import UnitRnnContext
    from tf2onnx.tf_loader import find_function

    found = _match_body(g)
    if found is not None:
        setattr(g, _ATTR, found)
    for op in ops:
        if not op.is_while():
            continue
        ctx = getattr(find_function(op.get_attr_str("body")), _ATTR, None)
        if ctx is None:
            continue
        kernel, recurrent, bias = (op.input[ctx[k]] for k in ("kernel", "recurrent", "bias"))
        if not all(g.is_const(w) for w in (kernel, recurrent, bias)):
            continue
        b = g.get_tensor_value(bias, as_list=False)
        source = op.inputs[ctx["x"]]
        if source.type != "TensorListFromTensor" or b.ndim != 2 or b.shape[0] != 2:
            continue
        context = UnitRnnContext()
        context.from_keras = True
        context.weights.update(
            {
                "gate_kernel": g.get_tensor_value(kernel, as_list=False),
                "hidden_kernel": g.get_tensor_value(recurrent, as_list=False),
                "gate_bias": b[0],
                "hidden_bias": b[1],
            }
        )
        context.attributes["activations"] = ["Sigmoid", "Tanh"]
        context.attributes["linear_before_reset"] = 1
        context.onnx_input_ids["X"] = source.input[0]
        context.onnx_input_ids["sequence_lens"] = ""
        context.onnx_input_ids["initial_state"] = GraphBuilder(g).make_unsqueeze(
            {"data": op.input[ctx["state"]], "axes": [0]}
        )
        builder = GRUUnitRewriter(g)
        builder.process_weights_and_bias(context)
        gru = builder.create_rnn_node(context)
        ys = GraphBuilder(g).make_squeeze({"data": gru.output[0], "axes": [1]})
        for consumer in g.find_output_consumers(op.output[ctx["out"]]):
            if consumer.type == "TensorListStack":
                g.replace_all_inputs(consumer.output[0], ys)
        g.replace_all_inputs(
            op.output[ctx["state"]], GraphBuilder(g).make_squeeze({"data": gru.output[1], "axes": [0]})
        )
    return list(g.get_nodes())


def before(original: Callable[[Any, list[Any]], list[Any]]) -> Callable[[Any, list[Any]], list[Any]]:
    """tf2onnx's GRU rewriter with ``rewrite`` run first (``_onnx.tf2onnx_hooks`` swaps it in).

    tf2onnx builds its rewriter list from module globals at each call, and custom rewriters run only
    after loops have become ONNX ``Loop``s, so the hook is the global its list names.
    """

    def both(g: Any, ops: list[Any]) -> list[Any]:
        return original(g, rewrite(g, ops))

    return both
