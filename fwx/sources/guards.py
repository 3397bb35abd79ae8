"""The shape guards a ``torch.export`` program checks on every call, read as data.

Besides its ``Dim`` ranges (``range_constraints``), a program keeps the
conditions its trace relied on as Python source (``ep._guards_code``):
``(((-1) + L['ids'].size()[1] + L['ids'].size()[0]*L['ids'].size()[1]) //
L['ids'].size()[1]) >= 2``. Calling the program with sizes that break one is
an ``AssertionError: Guard failed``. The text comes from the file, so it is
never ``eval``-ed: it is parsed, kept only when it is integer arithmetic and
comparisons over input sizes, and evaluated here node by node.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterator
from typing import Any

_ARITH: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_COMPARE: dict[type, Callable[[int, int], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}

Size = Callable[[str, int], int]


def guards(ep: Any) -> list[ast.expr]:
    """The program's guards that are integer arithmetic over input sizes (others are left out)."""
    out = []
    for text in getattr(ep, "_guards_code", None) or []:
        try:
            tree = ast.parse(str(text), mode="eval").body
        except (SyntaxError, ValueError):
            continue
        if _allowed(tree):
            out.append(tree)
    return out


def holds(check: ast.expr, size: Size) -> bool:
    """Whether ``check`` holds with ``size(input, axis)``; True when it cannot be evaluated (not ours to refuse)."""
    try:
        return bool(_value(check, size))
    except (KeyError, ZeroDivisionError, ValueError, TypeError):
        return True


def sizes_read(check: ast.expr) -> set[tuple[str, int]]:
    """The (input, axis) pairs a guard reads."""
    return {key for node in ast.walk(check) if (key := _size_ref(node)) is not None}


def _size_ref(node: ast.AST) -> tuple[str, int] | None:
    """``L['name'].size()[axis]`` as (name, axis)."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)):
        return None
    call = node.value
    if not (isinstance(call, ast.Call) and not call.args and isinstance(call.func, ast.Attribute)):
        return None
    if call.func.attr != "size":
        return None
    holder = call.func.value
    if not (
        isinstance(holder, ast.Subscript)
        and isinstance(holder.value, ast.Name)
        and holder.value.id == "L"
        and isinstance(holder.slice, ast.Constant)
        and isinstance(holder.slice.value, str)
        and isinstance(node.slice.value, int)
    ):
        return None
    return holder.slice.value, node.slice.value


def _allowed(node: ast.AST) -> bool:
    if _size_ref(node) is not None:
        return True
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    if isinstance(node, ast.BinOp):
        return type(node.op) in _ARITH and _allowed(node.left) and _allowed(node.right)
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, ast.USub) and _allowed(node.operand)
    if isinstance(node, ast.Compare):
        return all(type(op) in _COMPARE for op in node.ops) and all(map(_allowed, [node.left, *node.comparators]))
    if isinstance(node, ast.BoolOp):
        return all(map(_allowed, node.values))
    return False


def _value(node: ast.AST, size: Size) -> int | bool:
    ref = _size_ref(node)
    if ref is not None:
        return size(*ref)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp):
        return _ARITH[type(node.op)](int(_value(node.left, size)), int(_value(node.right, size)))
    if isinstance(node, ast.UnaryOp):
        return -int(_value(node.operand, size))
    if isinstance(node, ast.Compare):
        return all(_pairs(node, size))
    if isinstance(node, ast.BoolOp):
        values = (bool(_value(v, size)) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    raise ValueError("not a size guard")


def _pairs(node: ast.Compare, size: Size) -> Iterator[bool]:
    left = int(_value(node.left, size))
    for op, right_node in zip(node.ops, node.comparators, strict=True):
        right = int(_value(right_node, size))
        yield _COMPARE[type(op)](left, right)
        left = right
