"""Single-node ONNX cases checked against onnxruntime: the op-level harness.

A case is one node; inputs are fed at run time (with a dynamic first axis by
default, so the dynamic-shape code paths run) or baked in as initializers.
Cases of the same opset are merged into one model (``c<i>_`` prefixes) and
translated once with a direct ``tf.function`` call (no SavedModel write): a
trace costs ~0.1 s, so this keeps 160+ cases to a few seconds. A case whose
group fails to translate is re-run alone, so its own error is the one reported.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ATOL, RTOL = 1e-4, 1e-3


@dataclass(eq=False)
class Case:
    op: str
    inputs: list[tuple[str, np.ndarray | None, bool]]  # name, value (None = absent), constant?
    attrs: dict[str, Any] = field(default_factory=dict)
    opset: int = 17
    outputs: int = 1
    static: bool = False  # declare every input dim static (ops that need static sizes)
    id: str = ""

    @property
    def key(self) -> str:
        return self.id or self.op


def _parts(case: Case, prefix: str) -> tuple[list[Any], list[Any], Any, list[str]]:
    from onnx import helper, numpy_helper

    inputs, inits, names = [], [], []
    for name, value, const in case.inputs:
        if value is None:
            names.append("")
            continue
        full = prefix + name
        names.append(full)
        if const:
            inits.append(numpy_helper.from_array(value, full))
        else:
            dims: list[Any] = list(value.shape)
            if dims and not case.static:
                dims[0] = f"{full}_d0"
            inputs.append(helper.make_tensor_value_info(full, helper.np_dtype_to_tensor_dtype(value.dtype), dims))
    outs = [f"{prefix}y{i}" for i in range(case.outputs)]
    attrs = {k: numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v for k, v in case.attrs.items()}
    return inputs, inits, helper.make_node(case.op, names, outs, name=prefix + case.key, **attrs), outs


def make_model(cases: list[Case], prefixes: list[str]) -> Any:
    from onnx import TensorProto, helper, shape_inference

    inputs, inits, nodes, outs = [], [], [], []
    for case, prefix in zip(cases, prefixes, strict=True):
        i, k, n, o = _parts(case, prefix)
        inputs += i
        inits += k
        nodes.append(n)
        outs += o
    graph = helper.make_graph(
        nodes,
        "cases",
        inputs,
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", cases[0].opset)])
    model.ir_version = 8
    return shape_inference.infer_shapes(model, strict_mode=True)


def feeds_of(cases: list[Case], prefixes: list[str]) -> dict[str, np.ndarray]:
    return {
        p + n: v
        for c, p in zip(cases, prefixes, strict=True)
        for n, v, const in c.inputs
        if v is not None and not const
    }


Outputs = tuple[dict[str, np.ndarray], dict[str, np.ndarray]]


def run(cases: list[Case], prefixes: list[str], tflite: bool = False) -> Outputs:
    """(onnxruntime outputs, translated outputs), keyed by output name.

    With ``tflite`` the translation is saved, converted by TF's TFLite converter with builtin
    ops only (no Flex) and run by the LiteRT interpreter.
    """
    import onnxruntime as ort

    from fwx.converters.onnx_tf.translate import translate

    model = make_model(cases, prefixes)
    feeds = feeds_of(cases, prefixes)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))
    tr = translate(model)
    if not tflite:
        return ref, tr(feeds)
    return ref, _run_tflite(tr, feeds)


def _run_tflite(tr: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import tempfile

    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    with tempfile.TemporaryDirectory() as tmp:
        tr.save(tmp)
        conv = tf.lite.TFLiteConverter.from_saved_model(tmp)
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        flat = conv.convert()
    runner = Interpreter(model_content=flat).get_signature_runner()
    return dict(runner(**{tr.input_names[k]: v for k, v in feeds.items()}))


def compare(case: Case, prefix: str, ref: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> None:
    for i in range(case.outputs):
        r, y = ref[f"{prefix}y{i}"], got[f"{prefix}y{i}"]
        assert y.dtype == r.dtype, f"output {i}: dtype {y.dtype} != onnxruntime {r.dtype}"
        assert y.shape == r.shape, f"output {i}: shape {y.shape} != onnxruntime {r.shape}"
        if r.dtype.kind in "fc":
            np.testing.assert_allclose(y, r, atol=ATOL, rtol=RTOL, err_msg=f"output {i}")
        else:
            np.testing.assert_array_equal(y, r, err_msg=f"output {i}")


class Batch:
    """All cases, run per opset group on first use."""

    def __init__(self, cases: list[Case], tflite: bool = False) -> None:
        self.tflite = tflite
        self.groups: dict[int, list[Case]] = defaultdict(list)
        for c in cases:
            self.groups[c.opset].append(c)
        self.done: dict[int, Outputs | None] = {}

    def check(self, case: Case) -> None:
        group = self.groups[case.opset]
        if case.opset not in self.done:
            try:
                self.done[case.opset] = run(group, [f"c{i}_" for i in range(len(group))], self.tflite)
            except Exception:
                self.done[case.opset] = None
        result = self.done[case.opset]
        if result is None:  # isolate: this case's own error, or a pass if another case broke the group
            ref, got = run([case], [""], self.tflite)
            compare(case, "", ref, got)
            return
        index = next(i for i, c in enumerate(group) if c is case)
        compare(case, f"c{index}_", *result)
