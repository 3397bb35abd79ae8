"""Tracers: run a model once and return every intermediate tensor its runtime exposes, in graph order.

Built only after a validation failed (``fwx.validators.locate``), from the
runtime that was validated, each in a second session of its own so the
validated one is never changed:

* ONNX: a copy of the graph in memory with every node output made a graph
  output, on onnxruntime's CPU provider;
* TFLite: LiteRT with ``experimental_preserve_all_tensors`` and no default
  delegate (a delegated subgraph keeps its tensors to itself), tensors read
  by index in execution order, INT8 ones dequantised;
* SavedModel and Keras: ``fwx.validators.tracers_tf``; an eager PyTorch
  module: ``fwx.validators.tracers_torch`` (``fwx.validators.locate.tracer_for``
  picks one).

A loaded ScriptModule refuses forward hooks: a TorchScript reference is traced
through its ONNX conversion and a ``.pt2`` one through its FX graph
(``tracers_torch``); TorchScript and ``.pt2`` artifacts are not traced.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from fwx.validators.locate_match import Probe, torch_scope
from fwx.validators.tf_origin import tf2onnx_origins

Trace = list[tuple[Probe, np.ndarray]]


class Tracer(Protocol):
    def trace(self, feed: dict[str, np.ndarray]) -> Trace: ...


_ORT_NUMPY = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int8)": np.int8,
    "tensor(int16)": np.int16,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}


class OnnxTracer:
    """Every node output of the top-level graph (If/Loop bodies stay inside their node)."""

    def __init__(self, path: Path | bytes) -> None:
        import onnx
        import onnxruntime as ort

        model = onnx.load_from_string(path) if isinstance(path, bytes) else onnx.load(str(path))
        known = {o.name for o in model.graph.output}
        self.outputs = [o.name for o in model.graph.output]  # the model's own outputs, in order
        carried, hidden = qdq_view(model.graph)
        back = {dq: t for t, dq in carried.items()}  # a consumer reads the DequantizeLinear output: its tensor
        layers = tf2onnx_origins(model.graph)  # tf2onnx's own nodes (Conv__43) named after their Keras layer
        self.probes: list[Probe] = []
        self._read: list[str] = []  # per probe: the tensor whose value it stands for
        for node in model.graph.node:
            for out in node.output:
                if not out or out in hidden:
                    continue
                read = carried.get(out, out)
                if read not in known:
                    model.graph.output.append(onnx.ValueInfoProto(name=read))
                    known.add(read)
                name = node.name or out
                scope = torch_scope(name)
                origin = f"module {scope}" if scope else layers.get(name, "")
                inputs = tuple(back.get(i, i) for i in node.input)
                self.probes.append(Probe(out, name, node.op_type, origin, inputs))
                self._read.append(read)
        so = ort.SessionOptions()
        so.log_severity_level = 3
        self._session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        self._types = {i.name: _ORT_NUMPY.get(i.type) for i in self._session.get_inputs()}

    def trace(self, feed: dict[str, np.ndarray]) -> Trace:
        cast = {k: v.astype(self._types[k]) if self._types.get(k) else v for k, v in feed.items()}
        values = self._session.run(self._read, cast)
        return [(p, v) for p, v in zip(self.probes, values, strict=True) if isinstance(v, np.ndarray)]


_QDQ = {"QuantizeLinear", "DequantizeLinear"}


def qdq_view(graph: Any) -> tuple[dict[str, str], set[str]]:
    """What a QDQ graph carries: tensor -> the DequantizeLinear output its consumers read, and the outputs
    of the pairs themselves (and of weight pairs), which are not probes of their own.

    onnxruntime's QDQ format writes a node's float output, then a QuantizeLinear/DequantizeLinear pair, and
    every consumer reads the pair's output: that is the value the model carries (an activation folded into
    the node, a ReLU after a Conv, is applied by the pair's range). Comparing the node's own output with the
    float graph's tensor of the same name compares a value before the folded ReLU with one after it.
    """
    producer = {o: n for n in graph.node for o in n.output}
    constants = {i.name for i in graph.initializer}
    readers: dict[str, list[Any]] = {}
    for n in graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    carried: dict[str, str] = {}
    hidden: set[str] = set()
    for q in graph.node:
        if q.op_type != "QuantizeLinear" or not q.input or q.input[0] in constants:
            continue
        src = producer.get(q.input[0])
        users = readers.get(q.output[0], [])
        if (src is not None and src.op_type in _QDQ) or len(users) != 1 or users[0].op_type != "DequantizeLinear":
            continue
        carried[q.input[0]] = users[0].output[0]
        hidden.update([q.output[0], users[0].output[0]])
    for n in graph.node:  # weight pairs: constants, not values a sample flows through
        if n.op_type in _QDQ and all(i in constants or not i for i in n.input):
            hidden.update(n.output)
    return carried, hidden


class TFLiteTracer:
    """Every op output of subgraph 0 in execution order, kept by LiteRT's debugging mode."""

    def __init__(self, path: Path, input_names: Sequence[str]) -> None:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        with warnings.catch_warnings():  # LiteRT warns that preserving every tensor is for debugging: it is
            warnings.simplefilter("ignore")
            self._interp = Interpreter(
                model_path=str(path),
                experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
                experimental_preserve_all_tensors=True,
            )
        sigs = self._interp.get_signature_list()
        details = self._interp.get_input_details()
        if sigs:
            runner = self._interp.get_signature_runner(next(iter(sigs)))
            by_name = {n: int(d["index"]) for n, d in runner.get_input_details().items()}
        else:
            by_name = {}
        positional = [int(d["index"]) for d in details]
        self._inputs = {
            n: by_name.get(n, positional[i] if i < len(positional) else -1) for i, n in enumerate(input_names)
        }
        self._details = {int(d["index"]): d for d in self._interp.get_tensor_details()}

    def trace(self, feed: dict[str, np.ndarray]) -> Trace:
        interp = self._interp
        for name, index in self._inputs.items():
            interp.resize_tensor_input(index, list(feed[name].shape), strict=False)
        interp.allocate_tensors()
        for name, index in self._inputs.items():
            interp.set_tensor(index, _to_tensor(feed[name], self._details[index]))
        interp.invoke()
        out: Trace = []
        for op in interp._get_ops_details():
            if op["op_name"] == "DELEGATE":
                continue
            reads = tuple(str(self._details[i]["name"]) for i in op["inputs"] if i >= 0)
            for index in (int(i) for i in op["outputs"] if i >= 0):
                d = self._details[index]
                value = _from_tensor(interp.get_tensor(index), d)
                out.append((Probe(str(d["name"]), str(d["name"]), str(op["op_name"]), inputs=reads), value))
        return out


def _quant(d: dict[str, Any]) -> tuple[float, int] | None:
    q = d.get("quantization_parameters") or {}
    scales, zps = list(q.get("scales", [])), list(q.get("zero_points", []))
    if len(scales) != 1 or np.dtype(d["dtype"]).kind not in "iu":
        return None
    return float(scales[0]), int(zps[0]) if zps else 0


def _to_tensor(x: np.ndarray, d: dict[str, Any]) -> np.ndarray:
    dtype = np.dtype(d["dtype"])
    q = _quant(d)
    if q is not None and x.dtype.kind == "f":
        info = np.iinfo(dtype)
        return np.clip(np.round(x / q[0]) + q[1], info.min, info.max).astype(dtype)
    return x.astype(dtype)


def _from_tensor(x: np.ndarray, d: dict[str, Any]) -> np.ndarray:
    q = _quant(d)
    if q is None:
        return np.array(x, copy=True)
    return ((x.astype(np.float32) - np.float32(q[1])) * np.float32(q[0])).astype(np.float32)
