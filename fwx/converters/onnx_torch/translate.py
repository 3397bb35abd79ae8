"""ONNX ModelProto -> torch.fx GraphModule, one handler per node, in graph order.

The graph's inputs become ``forward``'s positional arguments in ONNX order;
``forward`` returns one tensor for a single-output model and a tuple in ONNX
output order otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import onnx
import torch
import torch.fx as fx
from onnx import numpy_helper

from fwx.converters.onnx_torch.builder import GraphBuilder
from fwx.converters.onnx_torch.ops import CHECKS, OPS, OnnxNode
from fwx.converters.onnx_torch.ops.registry import TARGET, decode_attrs
from fwx.converters.onnx_torch.values import Const, Value
from fwx.errors import ExportError, FwxError, UnsupportedOpsError
from fwx.runtimes.files import load_onnx

DEFAULT_DOMAINS = ("", "ai.onnx")


def load_model(path: Path) -> onnx.ModelProto:
    """Read an ONNX file (with external data) and inline local functions."""
    model = load_onnx(path, external_data=True)
    if model.functions:
        from onnx import inliner

        model = inliner.inline_local_functions(model)
    return model


def default_opset(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in DEFAULT_DOMAINS:
            return int(imp.version)
    return 1


def _all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from _all_nodes(g)


def unsupported_ops(model: onnx.ModelProto) -> list[str]:
    """Every op (or op feature) of the model the translator cannot express, sorted, without repeats."""
    opset = default_opset(model)
    bad: set[str] = set()
    for node in _all_nodes(model.graph):
        if node.domain not in DEFAULT_DOMAINS:
            bad.add(f"{node.domain}.{node.op_type}")
        elif node.op_type not in OPS:
            bad.add(node.op_type)
        elif node.op_type in CHECKS:
            reason = CHECKS[node.op_type](node, opset)
            if reason:
                bad.add(f"{node.op_type}({reason})")
    return sorted(bad)


def refuse_strings(model: onnx.ModelProto, target: str) -> None:
    """Torch tensors hold no strings: a string input (a Keras ``StringLookup``'s) stops the torch formats.

    The message names the layer when fwx froze it (its ``LabelEncoder`` node is named after it).
    """
    text = onnx.TensorProto.STRING
    names = [v.name for v in (*graph_inputs(model), *model.graph.output) if v.type.tensor_type.elem_type == text]
    if not names:
        return
    reader = next((n for n in model.graph.node if set(n.input) & set(names)), None)
    who = reader.name if reader is not None and " layer '" in reader.name else f"string tensor {names[0]!r}"
    raise ExportError(
        f"{who}: {target} has no string tensors", hint="export it to savedmodel, tflite or onnx, which hold strings"
    )


def check_supported(model: onnx.ModelProto, target: str = "PyTorch") -> None:
    refuse_strings(model, target)
    bad = unsupported_ops(model)
    if bad:
        raise UnsupportedOpsError(TARGET, bad, hint="convert through another path, or rewrite those ops")


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Real inputs: old graphs also list their initializers as inputs."""
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def _consumed(graph: onnx.GraphProto) -> set[str]:
    names = {o.name for o in graph.output}
    for node in graph.node:
        names.update(node.input)
    return names


def translate(model: onnx.ModelProto, sample: Mapping[str, np.ndarray]) -> fx.GraphModule:
    """Build the GraphModule; ``sample`` (one array per input) is run alongside for ranks and dtypes."""
    check_supported(model)
    opset, graph = default_opset(model), model.graph
    b = GraphBuilder()
    env: dict[str, Value] = {}
    for t in graph.initializer:
        env[t.name] = Const(torch.from_numpy(np.array(numpy_helper.to_array(t), copy=True)))
    with torch.no_grad():
        for inp in graph_inputs(model):
            env[inp.name] = b.placeholder(inp.name, torch.from_numpy(np.ascontiguousarray(sample[inp.name])))
        consumed = _consumed(graph)
        for node in graph.node:
            _translate_node(b, node, opset, env, consumed)
        missing = [o.name for o in graph.output if o.name not in env]
        if missing:
            raise ExportError(f"ONNX graph outputs {missing} are never produced", hint="the ONNX graph is malformed")
        return b.output([env[o.name] for o in graph.output])


def _translate_node(
    b: GraphBuilder, node: onnx.NodeProto, opset: int, env: dict[str, Value], consumed: set[str]
) -> None:
    inputs: list[Value | None] = []
    for name in node.input:
        if name and name not in env:
            raise ExportError(
                f"ONNX node {node.name} reads {name!r}, which nothing produces",
                hint="the graph is not topologically sorted or is malformed",
            )
        inputs.append(env[name] if name else None)
    n = OnnxNode(
        node.op_type,
        node.name,
        inputs,
        decode_attrs(node),
        opset,
        list(node.output),
        [bool(o) and o in consumed for o in node.output],
    )
    try:
        out = OPS[node.op_type](b, n)
    except FwxError:
        raise
    except Exception as e:
        raise ExportError(
            f"translating ONNX node {n.label} failed: {type(e).__name__}: {e}",
            hint="run with --debug for the traceback; this is a bug in fwx's ONNX -> PyTorch translator",
        ) from e
    values: list[Value] = list(out) if isinstance(out, (list, tuple)) else [out]  # type: ignore[list-item]
    for name, value in zip(node.output, values, strict=False):
        if name:
            env[name] = value
