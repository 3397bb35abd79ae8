"""Emits a torch.fx graph while running it on the sample, folding what is constant.

Every op goes through ``call``: when none of its arguments depends on a model
input, it runs once now and its result becomes a ``Const`` (this is the
constant-folding pass); otherwise it becomes an fx node, and it also runs on
the sample values so the next handler knows the rank and dtype it gets.
"""

from __future__ import annotations

import builtins
import keyword
import operator
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx as fx

from fwx.converters.onnx_torch import graph_fns as gf
from fwx.converters.onnx_torch.values import Const, Dyn, Item, SInt, Sym, Value, make_sym

#: Names the generated ``forward`` reads as globals; an argument with one of them would shadow it.
RESERVED = frozenset(dir(builtins)) | {
    "torch",
    "operator",
    "math",
    "inf",
    "nan",
    "device",
    "fx_pytree",
    "pytree",
    "NoneType",
    "Tensor",
    "List",
    "Optional",
    "fwx",
}


def identifier(name: str, prefix: str = "v") -> str:
    """A Python identifier from an ONNX name (fx attribute, argument or Dim name)."""
    out = re.sub(r"\W", "_", name).strip("_") or prefix
    if out[0].isdigit() or keyword.iskeyword(out) or out == "self":
        out = f"{prefix}_{out}"
    return out


class GraphBuilder:
    def __init__(self) -> None:
        self.graph = fx.Graph()
        self.root = torch.nn.Module()
        self._attr_nodes: dict[int, fx.Node] = {}
        self._sym_nodes: dict[int, Dyn] = {}
        self._used_names: set[str] = set()

    # -- naming and state --------------------------------------------------
    def _unique(self, hint: str, prefix: str) -> str:
        base = identifier(hint, prefix)[:48]
        name, i = base, 1
        while name in self._used_names:
            name, i = f"{base}_{i}", i + 1
        self._used_names.add(name)
        return name

    def placeholder(self, name: str, example: torch.Tensor) -> Dyn:
        hint = f"in_{name}" if identifier(name, "in") in RESERVED else name
        return Dyn(self.graph.placeholder(self._unique(hint, "in")), example)

    def buffer(self, c: Const, hint: str = "const") -> fx.Node:
        node = self._attr_nodes.get(id(c))
        if node is None:
            name = self._unique("c_" + hint, "c")
            self.root.register_buffer(name, c.value.detach().clone().contiguous())
            node = self.graph.get_attr(name)
            self._attr_nodes[id(c)] = node
        return node

    def submodule(self, module: torch.nn.Module, hint: str) -> str:
        name = self._unique(hint, "m")
        self.root.add_module(name, module)
        return name

    # -- values ---------------------------------------------------------------
    def node_of(self, v: Value) -> fx.Node:
        """The fx node of a value; constants become buffers, Syms become int64 tensors."""
        if isinstance(v, Dyn):
            return v.node
        if isinstance(v, Const):
            return self.buffer(v)
        return self.materialize(v).node

    def materialize(self, v: Sym) -> Dyn:
        done = self._sym_nodes.get(id(v))
        if done is None:
            items = [i.node if isinstance(i, SInt) else i for i in v.items]
            ex = [i.example if isinstance(i, SInt) else i for i in v.items]
            fn: Callable[..., torch.Tensor] = gf.int_to_tensor if v.scalar else gf.ints_to_tensor
            arg: Any = items[0] if v.scalar else items
            exarg: Any = ex[0] if v.scalar else ex
            node = self.graph.call_function(fn, (arg,))
            done = Dyn(node, fn(exarg))
            if v.grid is not None:
                node = self.graph.call_method("reshape", (node, list(v.grid)))
                done = Dyn(node, done.example.reshape(v.grid))
            if v.dtype != torch.int64:
                node = self.graph.call_method("to", (node, v.dtype))
                done = Dyn(node, done.example.to(v.dtype))
            self._sym_nodes[id(v)] = done
        return done

    def example(self, v: Value) -> torch.Tensor:
        if isinstance(v, Const):
            return v.value
        if isinstance(v, Dyn):
            return v.example
        ex = [i.example if isinstance(i, SInt) else i for i in v.items]
        return torch.tensor(ex[0] if v.scalar else ex, dtype=v.dtype).reshape(v.dims)

    def rank(self, v: Value) -> int:
        if isinstance(v, Sym):
            return len(v.dims)
        return self.example(v).dim()

    # -- emitting ---------------------------------------------------------------
    def _args(self, a: Any, as_node: bool) -> Any:
        if isinstance(a, (Const, Dyn, Sym)):
            return self.node_of(a) if as_node else self.example(a)
        if isinstance(a, SInt):
            return a.node if as_node else a.example
        if isinstance(a, (list, tuple)):
            return type(a)(self._args(x, as_node) for x in a)
        if isinstance(a, dict):
            return {k: self._args(v, as_node) for k, v in a.items()}
        return a

    @staticmethod
    def _is_static(a: Any) -> bool:
        if isinstance(a, (Dyn, SInt, Sym)):
            return False
        if isinstance(a, (list, tuple)):
            return all(GraphBuilder._is_static(x) for x in a)
        if isinstance(a, dict):
            return all(GraphBuilder._is_static(x) for x in a.values())
        return True

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Value:
        """Run ``fn`` now if its arguments are all constant, else emit it (and run it on the sample)."""
        out = self._run(fn, args, kwargs)
        if self._is_static(args) and self._is_static(kwargs):
            return Const(out)
        node = self.graph.call_function(fn, self._args(args, True), self._args(kwargs, True))
        return Dyn(node, out)

    def _run(self, fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        return fn(*self._args(tuple(args), False), **self._args(kwargs, False))

    def method(self, name: str, x: Value, *args: Any) -> Value:
        ex = getattr(self.example(x), name)(*self._args(args, False))
        if isinstance(x, Const) and self._is_static(args):
            return Const(ex)
        return Dyn(self.graph.call_method(name, (self.node_of(x), *self._args(args, True))), ex)

    def split(self, v: Value, n: int) -> list[Value]:
        """Outputs of a call that returned a tuple of ``n`` tensors."""
        if isinstance(v, Const):
            raise TypeError("constant multi-output calls are split by call_multi")
        assert isinstance(v, Dyn)
        return [Dyn(self.graph.call_function(operator.getitem, (v.node, i)), v.example[i]) for i in range(n)]

    def call_multi(self, fn: Callable[..., Any], n: int, *args: Any, **kwargs: Any) -> list[Value]:
        out = self._run(fn, args, kwargs)
        if self._is_static(args) and self._is_static(kwargs):
            return [Const(t) for t in out]
        node = self.graph.call_function(fn, self._args(args, True), self._args(kwargs, True))
        return [Dyn(self.graph.call_function(operator.getitem, (node, i)), out[i]) for i in range(n)]

    def call_module(self, name: str, n: int, *args: Any) -> list[Value]:
        module = getattr(self.root, name)
        out = module(*self._args(args, False))
        node = self.graph.call_module(name, self._args(args, True))
        return [Dyn(self.graph.call_function(operator.getitem, (node, i)), out[i]) for i in range(n)]

    # -- symbolic ints ------------------------------------------------------------
    def size(self, x: Dyn, dim: int) -> SInt:
        node = self.graph.call_method("size", (x.node, dim))
        return SInt(node, int(x.example.size(dim)))

    def int_op(self, fn: Callable[[int, int], int], a: Item, b: Item) -> Item:
        """Integer arithmetic on items: plain Python when both are known, an fx node otherwise."""
        ea = a.example if isinstance(a, SInt) else a
        eb = b.example if isinstance(b, SInt) else b
        if isinstance(a, int) and isinstance(b, int):
            return fn(a, b)
        na = a.node if isinstance(a, SInt) else a
        nb = b.node if isinstance(b, SInt) else b
        return SInt(self.graph.call_function(fn, (na, nb)), fn(ea, eb))

    def sym(
        self,
        items: Sequence[Item],
        scalar: bool = False,
        dtype: torch.dtype = torch.int64,
        dims: tuple[int, ...] | None = None,
    ) -> Const | Sym:
        return make_sym(list(items), scalar, dtype, dims)

    def item_of_tensor(self, v: Value) -> Item:
        """A scalar tensor as an int item (runtime ``int(t)`` when it is not known)."""
        if isinstance(v, Const):
            return int(v.value.reshape(-1)[0])
        if isinstance(v, Sym):
            return v.items[0]
        node = self.graph.call_function(gf.tensor_to_int, (v.node,))
        return SInt(node, gf.tensor_to_int(v.example))

    # -- finishing ---------------------------------------------------------------
    def output(self, values: Sequence[Value]) -> fx.GraphModule:
        """Close the graph: one tensor for a single output, a tuple in ONNX order otherwise."""
        nodes: list[fx.Node] = []
        for v in values:
            node = self.node_of(v)
            if node.op in ("get_attr", "placeholder") or node in nodes:
                node = self.graph.call_method("clone", (node,))
            nodes.append(node)
        self.graph.output(nodes[0] if len(nodes) == 1 else tuple(nodes))
        gm = fx.GraphModule(self.root, self.graph, class_name="OnnxModule")
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.delete_all_unused_submodules()
        gm.recompile()
        return gm
