"""Reading an ONNX model into the plain structures the translator walks.

Kept free of TensorFlow so that ``precheck`` (list every unsupported op before
any work) and the signature can be computed with ``onnx`` alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fwx.errors import ExportError
from fwx.runtimes.files import load_onnx
from fwx.signature import Dim, TensorSpec

#: ONNX domains whose ops share the default op set.
DEFAULT_DOMAINS = ("", "ai.onnx")
#: What TF accepts as a SavedModel signature input name.
_TF_INPUT_NAME = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\-/]*$")


@dataclass
class Node:
    """One ONNX node with its attributes decoded to Python/NumPy values."""

    op: str
    domain: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    #: Sub-graphs (``If``'s branches), parsed, and the outer values they read (ordering needs them too).
    graphs: dict[str, Graph] = field(default_factory=dict)
    implicit: list[str] = field(default_factory=list)

    @property
    def needs(self) -> list[str]:
        """Every value the node reads: its inputs and what its sub-graphs read from outside."""
        return [*self.inputs, *self.implicit]

    @property
    def label(self) -> str:
        return f"{self.op} node {self.name or self.outputs[0]!r}"

    @property
    def key(self) -> str:
        """The op table's key: the op type, qualified by its domain outside the default one."""
        return self.op if self.domain in DEFAULT_DOMAINS else f"{self.domain}::{self.op}"


@dataclass
class Graph:
    """A topologically sorted main graph, its constants and its interface."""

    nodes: list[Node]
    initializers: dict[str, np.ndarray]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    opset: int
    #: Outputs whose ONNX type carries no shape at all (as opposed to a scalar's empty shape).
    unshaped: set[str] = field(default_factory=set)


def load(path: Path) -> Any:
    """Load an ``.onnx`` file (external data included) as a ``ModelProto``."""
    return load_onnx(path, external_data=True)


def default_opset(model: Any) -> int:
    for imp in model.opset_import:
        if imp.domain in DEFAULT_DOMAINS:
            return int(imp.version)
    return 1


def _attr_value(attr: Any) -> Any:
    from onnx import helper, numpy_helper

    if attr.type == attr.TENSOR:
        return numpy_helper.to_array(attr.t)
    if attr.type in (attr.GRAPH, attr.GRAPHS):
        return attr  # only ever reported as unsupported
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8") for v in value]
    return value


def _node(proto: Any, opset: int) -> Node:
    graphs = {a.name: _subgraph(a.g, opset) for a in proto.attribute if a.type == a.GRAPH}
    outer = sorted({i for g in graphs.values() for i in _outside(g.nodes, _own(g))})
    return Node(
        proto.op_type,
        proto.domain,
        proto.name,
        list(proto.input),
        list(proto.output),
        {a.name: _attr_value(a) for a in proto.attribute},
        graphs,
        outer,
    )


def _own(graph: Graph) -> set[str]:
    return set(graph.initializers) | {s.name for s in graph.inputs}


def _outside(nodes: list[Node], own: set[str]) -> set[str]:
    """Values ``nodes`` read that neither they nor ``own`` (a body's constants and inputs) make."""
    made = own | {o for n in nodes for o in n.outputs}
    return {i for n in nodes for i in n.needs if i and i not in made}


def _subgraph(g: Any, opset: int) -> Graph:
    """A body (``If`` branch) as a ``Graph``: its own constants and nodes; what it reads from outside stays
    a name the enclosing scope resolves."""
    from onnx import numpy_helper

    body = Graph(
        [_node(n, opset) for n in g.node],
        {t.name: numpy_helper.to_array(t) for t in g.initializer},
        [_spec(v) for v in g.input],
        [_spec(v) for v in g.output],
        opset,
    )
    body.nodes = _toposort(body.nodes, _own(body) | _outside(body.nodes, _own(body)))
    return body


def _spec(value_info: Any) -> TensorSpec:
    from onnx import helper

    ttype = value_info.type.tensor_type
    if not value_info.type.HasField("tensor_type"):
        raise ExportError(
            f"ONNX value {value_info.name!r} is not a tensor",
            hint="fwx translates models whose inputs and outputs are plain tensors",
        )
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(ttype.elem_type)).name
    dims: list[Dim] = []
    for d in ttype.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param or -1)
    return TensorSpec(value_info.name, dtype, tuple(dims))


def _toposort(nodes: list[Node], available: set[str]) -> list[Node]:
    """Kahn's order; ONNX files are usually sorted already, but the spec does not promise it."""
    ready = set(available) | {""}
    pending = list(nodes)
    ordered: list[Node] = []
    while pending:
        rest = [n for n in pending if not all(i in ready for i in n.needs)]
        progressed = [n for n in pending if all(i in ready for i in n.needs)]
        if not progressed:
            missing = sorted({i for n in rest for i in n.needs if i not in ready})
            raise ExportError(
                f"the ONNX graph uses values nothing produces: {', '.join(missing[:5])}",
                hint="check the model with onnx.checker.check_model",
            )
        for n in progressed:
            ordered.append(n)
            ready.update(n.outputs)
        pending = rest
    return ordered


def parse(model: Any) -> Graph:
    """Turn a ``ModelProto`` into a sorted ``Graph`` of plain values."""
    from onnx import numpy_helper

    g = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    inputs = [_spec(v) for v in g.input if v.name not in inits]
    outputs = [_spec(v) for v in g.output]
    opset = default_opset(model)
    nodes = _toposort([_node(n, opset) for n in g.node], set(inits) | {s.name for s in inputs})
    unshaped = {v.name for v in g.output if not v.type.tensor_type.HasField("shape")}
    return Graph(nodes, inits, inputs, outputs, opset, unshaped)


def _walk(nodes: Iterable[Any]) -> Iterable[Any]:
    """Every node, including those inside If/Loop/Scan bodies."""
    for n in nodes:
        yield n
        for a in n.attribute:
            if a.type == a.GRAPH:
                yield from _walk(a.g.node)
            elif a.type == a.GRAPHS:
                for sub in a.graphs:
                    yield from _walk(sub.node)


def unsupported_ops(model: Any, supported: Iterable[str]) -> list[str]:
    """Every op type (with its domain when not the default one) the translator lacks."""
    known = set(supported)
    missing: set[str] = set()
    for n in _walk(model.graph.node):
        if n.domain not in DEFAULT_DOMAINS:
            if f"{n.domain}::{n.op_type}" not in known:
                missing.add(f"{n.domain}::{n.op_type}")
        elif n.op_type not in known:
            missing.add(n.op_type)
    return sorted(missing)


def tf_input_names(names: list[str]) -> dict[str, str]:
    """ONNX input name -> a name TF accepts for a signature input (unique; unchanged when valid)."""
    out = {n: n for n in names if _TF_INPUT_NAME.match(n)}
    used = set(out)
    for name in (n for n in names if n not in out):
        new = re.sub(r"[^A-Za-z0-9_.\-/]", "_", name)
        if not _TF_INPUT_NAME.match(new):
            new = "input" + new
        base, k = new, 1
        while new in used:
            new, k = f"{base}_{k}", k + 1
        used.add(new)
        out[name] = new
    return {n: out[n] for n in names}
