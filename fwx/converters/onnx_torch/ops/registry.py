"""The op table: ONNX op type -> handler that emits torch for one node.

A handler gets the builder and an ``OnnxNode`` (inputs already translated to
values, attributes decoded) and returns the node's output values in order.
An optional ``check`` looks at the raw NodeProto before any translation so
``precheck`` can list unsupported attribute combinations next to unknown ops.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx
import torch
from onnx import numpy_helper

from fwx.converters.onnx_torch.builder import GraphBuilder
from fwx.converters.onnx_torch.values import Const, Value
from fwx.errors import ExportError, UnsupportedOpsError

TARGET = "the ONNX -> PyTorch translator"


@dataclass
class OnnxNode:
    op_type: str
    name: str
    inputs: list[Value | None]
    attrs: dict[str, Any]
    opset: int
    outputs: list[str]
    used: list[bool] = field(default_factory=list)

    def input(self, i: int) -> Value | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def need(self, i: int) -> Value:
        v = self.input(i)
        if v is None:
            raise ExportError(f"ONNX node {self.label} lacks its input #{i}", hint="the ONNX graph is malformed")
        return v

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    @property
    def label(self) -> str:
        return f"{self.name or '(unnamed)'} ({self.op_type})"

    def const(self, i: int) -> torch.Tensor | None:
        """Input ``i`` when it is known at build time; ExportError if it is present but not."""
        v = self.input(i)
        if v is None:
            return None
        if not isinstance(v, Const):
            raise ExportError(
                f"ONNX node {self.label}: input #{i} must be constant for this translation",
                hint="fold it in the ONNX graph first (e.g. onnxsim) or file an issue",
            )
        return v.value

    def const_ints(self, i: int) -> list[int] | None:
        t = self.const(i)
        return None if t is None else [int(x) for x in t.reshape(-1).tolist()]

    def unsupported(self, what: str) -> UnsupportedOpsError:
        return UnsupportedOpsError(
            TARGET, [f"{self.op_type}({what})"], hint="rewrite that part of the model or convert through another path"
        )


Handler = Callable[[GraphBuilder, OnnxNode], "Value | Sequence[Value]"]
Check = Callable[[onnx.NodeProto, int], "str | None"]

OPS: dict[str, Handler] = {}
CHECKS: dict[str, Check] = {}


def op(*names: str, check: Check | None = None) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for name in names:
            if name in OPS:
                raise ValueError(f"ONNX op {name} already has a handler")
            OPS[name] = fn
            if check is not None:
                CHECKS[name] = check
        return fn

    return register


def decode_attrs(node: onnx.NodeProto) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, onnx.TensorProto):
            v = torch.from_numpy(numpy_helper.to_array(v).copy())
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [x.decode() for x in v]
        out[a.name] = v
    return out


def attr_of(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            v = onnx.helper.get_attribute_value(a)
            return v.decode() if isinstance(v, bytes) else v
    return default
