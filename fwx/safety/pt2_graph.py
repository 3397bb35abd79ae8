"""Read a ``.pt2`` program's serialized graph (``models/*.json``) as data and allow only tensor computation.

``torch.export.load`` turns every node's ``target`` string into whatever
``torch.<dotted path>`` names, hands shape expressions (``expr_str``) to
``sympy.sympify`` (which evaluates Python), and ``ExportedProgram.module()``
compiles ``guards_code`` with ``exec``. So three allow-lists, each derived
from torch itself:

- node targets (and operator arguments such as ``auto_functionalized``'s op):
  ``aten`` overloads torch marks as computation (tagged ``core`` or
  ``pointwise``, with a registered decomposition, or a
  ``CompositeImplicitAutograd`` kernel), their in-place/``out`` siblings,
  whose schema takes no ``Storage`` or ``Stream``; the shape-assertion ops
  ``torch.export`` inserts; ``prims``; the control-flow and grad-mode
  higher-order ops; the symbolic-int ops the serializer itself lists
  (``_SYM_OPS``) and ``operator.getitem``. Anything else (``aten.from_file``,
  ``aten._print``, ``aten.save``, other namespaces, ``torch.load``, ``#ext:``
  handlers) is refused by name.
- shape expressions: a Python expression of sympy constructors
  (subclasses of ``sympy.Basic``), symbols, numbers and arithmetic; no
  attribute access, no other calls, no strings but names and numbers.
- guards: comparisons and arithmetic over ``L[...]`` input sizes, with
  ``.size()``/``.stride()`` calls, ``math``/``torch.sym_*`` functions and nothing else.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from typing import Any

#: Higher-order ops ``torch.export`` emits for control flow, grad/autocast regions, functionalized
#: mutation and attention masks. Not allowed: ``print``, ``with_effects``, ``call_torchbind``,
#: Triton/AOTI/ExecuTorch delegates, ``invoke_leaf_function`` (Python), ``inline_asm_elementwise``.
ALLOWED_HIGHER_ORDER = frozenset(
    {
        "cond",
        "while_loop",
        "while_loop_stack_output",
        "map_impl",
        "scan",
        "associative_scan",
        "wrap_with_set_grad_enabled",
        "wrap_with_autocast",
        "auto_functionalized",
        "auto_functionalized_v2",
        "invoke_subgraph",
        "out_dtype",
        "flex_attention",
    }
)
#: Assertion and shape ops ``torch.export`` itself inserts into programs.
EXPORT_ATEN = frozenset(
    {
        "_assert_scalar",
        "_assert_async",
        "_assert_tensor_metadata",
        "sym_constrain_range",
        "sym_constrain_range_for_size",
        "sym_size",
        "sym_stride",
        "sym_numel",
        "sym_storage_offset",
        "lift_fresh",
        "lift_fresh_copy",
        "_functional_assert_async",
        "_functional_sym_constrain_range",
        "_functional_sym_constrain_range_for_size",
    }
)
_GUARD_CALLS = frozenset({"IsNonOverlappingAndDenseIndicator", "cast_symbool_to_symint_guardless", "max", "min", "abs"})
_GUARD_METHODS = frozenset({"size", "stride", "storage_offset", "numel", "dim"})
_MATH = frozenset({"floor", "ceil", "trunc", "sqrt", "log2", "isnan", "isinf", "inf"})
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[-+]?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?|[-+]?inf|nan")
_SAFE_NODES = (
    ast.Expression,
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.Compare,
    ast.operator,
    ast.unaryop,
    ast.boolop,
    ast.cmpop,
    ast.Load,
    ast.keyword,
)


def graph_problems(doc: Any) -> list[str]:
    """Every operator, shape expression and guard in one serialized program outside the allow-lists."""
    found: list[str] = []
    for kind, value in _strings(doc):
        why = _check(kind, value)
        if why and why not in found:
            found.append(why)
    return found


def _check(kind: str, value: str) -> str | None:
    if kind == "op":
        return None if target_allowed(value) else f"operator {value} (not a side-effect-free tensor op)"
    if kind == "expr":
        return None if _expr_ok(value) else f"shape expression {value[:80]!r} (not plain sympy arithmetic)"
    return None if _guard_ok(value) else f"guard {value[:80]!r} (not a plain size comparison)"


def _strings(doc: Any) -> Iterator[tuple[str, str]]:
    """``(kind, string)`` for every node target, operator argument, shape expression and guard."""
    todo = [doc]
    while todo:
        item = todo.pop()
        if isinstance(item, list):
            todo.extend(item)
        elif isinstance(item, dict):
            for key, value in item.items():
                if isinstance(value, str):
                    if key == "target" or key == "as_operator":
                        yield "op", value
                    elif key == "expr_str":
                        yield "expr", value
                elif key == "guards_code" and isinstance(value, list):
                    yield from (("guard", g if isinstance(g, str) else repr(g)) for g in value)
                else:
                    todo.append(value)


def target_allowed(target: str) -> bool:
    """Whether a serialized node target names an operator on the allow-list."""
    if target in _python_ops():
        return True
    parts = target.split(".")
    if parts[:3] == ["torch", "ops", "higher_order"] and len(parts) == 4:
        return parts[3] in ALLOWED_HIGHER_ORDER
    if len(parts) != 5 or parts[:2] != ["torch", "ops"]:
        return False
    namespace, name, overload = parts[2:]
    if namespace == "prims":
        return _overload(namespace, name, overload) is not None
    if namespace == "aten":
        return _aten_allowed(name, overload)
    return False


@functools.lru_cache(maxsize=1)
def _python_ops() -> frozenset[str]:
    """Serialized names of the symbolic-int ops the serializer lists, and ``operator.getitem``."""
    import operator

    from torch._export.serde.serialize import _SYM_OPS

    return frozenset(f"{f.__module__}.{f.__name__}" for f in (*_SYM_OPS, operator.getitem))


def _overload(namespace: str, name: str, overload: str) -> Any:
    import torch

    if not name.isidentifier() or not overload.isidentifier():
        return None
    try:
        op = getattr(getattr(getattr(torch.ops, namespace), name), overload)
    except (AttributeError, RuntimeError):
        return None
    return op if isinstance(op, torch._ops.OpOverload) else None  # not a Python attribute such as __class__


@functools.lru_cache(maxsize=4096)
def _aten_allowed(name: str, overload: str) -> bool:
    op = _overload("aten", name, overload)
    if op is None or not _schema_stays_in_tensors(op):
        return False
    if name in EXPORT_ATEN or _computes(op):
        return True
    for sibling in {name, name.rstrip("_")}:  # an in-place or out= variant of an allowed computation
        packet = _overload("aten", sibling, "default")
        packet = getattr(packet, "overloadpacket", None)
        if packet is not None and any(_computes(getattr(packet, o)) for o in packet.overloads()):
            return True
    return False


def _schema_stays_in_tensors(op: Any) -> bool:
    kinds = {str(a.type) for a in op._schema.arguments} | {str(r.type) for r in op._schema.returns}
    return not any("Storage" in k or "Stream" in k for k in kinds)


@functools.lru_cache(maxsize=1)
def _decomposed() -> frozenset[Any]:
    import torch._decomp
    from torch.export import default_decompositions

    return frozenset(torch._decomp.decomposition_table) | frozenset(default_decompositions())


def _computes(op: Any) -> bool:
    """torch marks ``op`` as computation: core ATen, pointwise, decomposable, or a composite of other ops."""
    import torch

    if torch.Tag.core in op.tags or torch.Tag.pointwise in op.tags or op in _decomposed():
        return True
    try:
        return bool(op.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd))
    except RuntimeError:
        return False


@functools.lru_cache(maxsize=1)
def _sympy_names() -> dict[str, Any]:
    import sympy
    import torch.utils._sympy.functions as tf

    names = {k: v for k, v in vars(sympy).items() if not k.startswith("_")}
    names.update({k: v for k, v in vars(tf).items() if not k.startswith("_")})
    return names


def _is_sympy_class(obj: Any) -> bool:
    import sympy

    return isinstance(obj, type) and issubclass(obj, sympy.Basic)


def _parse(text: str) -> ast.AST | None:
    if len(text) > 10_000:
        return None
    try:
        return ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _expr_ok(text: str) -> bool:
    """A sympy ``srepr``/``str`` expression: Basic constructors over symbols, numbers and arithmetic."""
    tree = _parse(text)
    if tree is None:
        return False
    names = _sympy_names()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or not _is_sympy_class(names.get(node.func.id)):
                return False
        elif isinstance(node, ast.Name):
            if node.id.startswith("_") or node.id in names and not _is_basic(names[node.id]):
                return False
        elif isinstance(node, ast.Constant):
            if not _plain_constant(node.value):
                return False
        elif not isinstance(node, _SAFE_NODES):
            return False
    return True


def _is_basic(obj: Any) -> bool:
    import sympy

    return _is_sympy_class(obj) or isinstance(obj, sympy.Basic)


def _plain_constant(value: Any) -> bool:
    if isinstance(value, str):
        return _WORD.fullmatch(value) is not None and "__" not in value
    return value is None or isinstance(value, (bool, int, float))


def _guard_ok(text: str) -> bool:
    """Guard code: sizes of ``L[...]`` inputs compared and combined; it is pasted into Python source."""
    if any(c in text for c in '"\\\n\r') or "__" in text:
        return False
    tree = _parse(text)
    return tree is not None and all(_guard_node_ok(n) for n in ast.walk(tree))


def _guard_node_ok(node: ast.AST) -> bool:
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Name):
            return f.id in _GUARD_CALLS
        return isinstance(f, ast.Attribute) and (
            f.attr in _GUARD_METHODS or (isinstance(f.value, ast.Name) and _module_function(f.value.id, f.attr))
        )
    if isinstance(node, ast.Attribute):
        return node.attr in _GUARD_METHODS or (
            isinstance(node.value, ast.Name) and _module_function(node.value.id, node.attr)
        )
    if isinstance(node, ast.Name):
        return node.id in {"L", "math", "torch", "inf", *_GUARD_CALLS}
    if isinstance(node, ast.Subscript):
        return True  # its value and slice are walked on their own
    if isinstance(node, ast.Constant):
        return _plain_constant(node.value)
    return isinstance(node, (*_SAFE_NODES, ast.Tuple))


def _module_function(module: str, attr: str) -> bool:
    if module == "math":
        return attr in _MATH
    return module == "torch" and attr.startswith("sym_") and attr.isidentifier()
