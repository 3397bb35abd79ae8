"""Build one-node ONNX models and compare fwx's translation with onnxruntime."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import helper, numpy_helper

from fwx.converters.onnx_torch.translate import translate

ATOL, RTOL = 1e-4, 1e-3
IR_FOR_OPSET = {**dict.fromkeys(range(1, 19), 8), 19: 9, 20: 9, 21: 10, 22: 10}


def np_type(a: np.ndarray) -> int:
    return helper.np_dtype_to_tensor_dtype(a.dtype)


def node_model(
    op_type: str,
    inputs: dict[str, np.ndarray],
    *,
    consts: dict[str, np.ndarray] | None = None,
    outputs: Sequence[str] = ("y",),
    opset: int = 17,
    dims: dict[str, list[Any]] | None = None,
    input_order: Sequence[str] | None = None,
    **attrs: Any,
) -> onnx.ModelProto:
    """One node reading runtime ``inputs`` and constant ``consts`` (in ``input_order``, "" = absent)."""
    consts = consts or {}
    order = list(input_order) if input_order is not None else [*inputs, *consts]
    node = helper.make_node(op_type, order, list(outputs), **attrs)
    return graph_model([node], inputs, consts=consts, outputs=outputs, opset=opset, dims=dims)


def graph_model(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, np.ndarray],
    *,
    consts: dict[str, np.ndarray] | None = None,
    outputs: Sequence[str] = ("y",),
    opset: int = 17,
    dims: dict[str, list[Any]] | None = None,
) -> onnx.ModelProto:
    dims = dims or {}
    ins = [helper.make_tensor_value_info(k, np_type(v), dims.get(k, list(v.shape))) for k, v in inputs.items()]
    outs = [onnx.ValueInfoProto(name=o) for o in outputs]  # types filled in by shape inference below
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in (consts or {}).items()]
    graph = helper.make_graph(nodes, "t", ins, outs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = IR_FOR_OPSET[opset]
    return onnx.shape_inference.infer_shapes(model)


def run_ort(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.log_severity_level = 4
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return list(sess.run(None, inputs))


def run_torch(module: Any, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    with torch.no_grad():
        out = module(*(torch.from_numpy(np.ascontiguousarray(v)) for v in inputs.values()))
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o.numpy() for o in outs]


def assert_same(got: Sequence[np.ndarray], ref: Sequence[np.ndarray], label: str = "") -> float:
    assert len(got) == len(ref), (label, len(got), len(ref))
    worst = 0.0
    for i, (g, r) in enumerate(zip(got, ref, strict=True)):
        assert g.shape == r.shape, (label, i, g.shape, r.shape)
        assert g.dtype == r.dtype, (label, i, g.dtype, r.dtype)
        if r.dtype.kind == "f":
            np.testing.assert_allclose(g, r, atol=ATOL, rtol=RTOL, err_msg=f"{label} output {i}")
            worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - r), initial=0.0)))
        else:
            np.testing.assert_array_equal(g, r, err_msg=f"{label} output {i}")
    return worst


def check_model(
    model: onnx.ModelProto,
    inputs: dict[str, np.ndarray],
    *,
    script: bool = True,
    others: Sequence[dict[str, np.ndarray]] = (),
) -> torch.fx.GraphModule:
    """Translate with ``inputs`` as the sample; the GraphModule (and its TorchScript) must match onnxruntime
    on ``inputs`` and on every dict in ``others`` (other sizes)."""
    gm = translate(model, inputs)
    modules: list[tuple[str, Any]] = [("fx", gm)]
    if script:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            modules.append(("script", torch.jit.script(gm)))
    for feeds in (inputs, *others):
        ref = run_ort(model, feeds)
        for label, module in modules:
            assert_same(run_torch(module, feeds), ref, label)
    return gm


def rand(*shape: int, seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    rng = np.random.default_rng(seed + sum(shape))
    return rng.standard_normal(shape).astype(dtype)
