"""Bounds on what one chat template render may cost: time, and the sizes of the values it builds.

Jinja's sandbox refuses Python internals but bounds nothing else: a request's
own ``chat_template`` of two nested ``range(100000)`` loops held a thread for
hours, and ``9 ** (9 ** 9)``, ``'a' * 10**10`` or ``x|center(10**10)`` ask
one C call for gigabytes before the 4 Mi-character prompt limit could look at
the result. So every Python line of the render checks a deadline, and the
operators, filters and calls that amplify a value check their operands first.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from fwx.errors import InputError

RENDER_SECONDS = 2.0
MAX_VALUE = 4 * 2**20  # characters or items of one value, as the rendered prompt
MAX_INT_BITS = 4096
_WIDE_FORMAT = re.compile(r"\d{8,}")  # a width or precision of 10**7 or more in a format string


def too_costly(what: str) -> InputError:
    return InputError(
        f"the chat template failed: {what}", hint="a chat template renders messages; send a smaller template"
    )


def render_bounded(render: Callable[[], str]) -> str:
    """``render()`` under a deadline checked on every line the template's code runs (this thread only)."""
    deadline = time.monotonic() + RENDER_SECONDS

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if time.monotonic() > deadline:
            raise too_costly(f"it ran over {RENDER_SECONDS:g} s")
        return local

    def call(frame: FrameType, event: str, arg: Any) -> Any:
        return local

    previous = sys.gettrace()
    sys.settrace(call)
    try:
        return render()
    finally:
        sys.settrace(previous)


def _sized(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else 0


def check_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Refuse a call whose numbers or values could make one oversized value (widths, counts, fills)."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_VALUE:
            raise too_costly(f"a call was given {value}, over the {MAX_VALUE} limit")
        if _sized(value) > MAX_VALUE:
            raise too_costly(f"a call was given a value of {_sized(value)} items, over the {MAX_VALUE} limit")


def check_format(template: Any) -> None:
    if isinstance(template, str) and _WIDE_FORMAT.search(template):
        raise too_costly("a format string asks for a width of 10**7 or more")


def check_replace(text: Any, old: Any, new: Any) -> None:
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str):
        grown = (text.count(old) if old else len(text) + 1) * len(new)
        if len(text) + grown > MAX_VALUE:
            raise too_costly(f"a replace makes over {MAX_VALUE} characters")


def check_call(obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """A call from the template: its arguments, and what str.replace would build."""
    check_args(args, kwargs)
    owner = getattr(obj, "__self__", None)
    if isinstance(owner, str) and getattr(obj, "__name__", "") == "replace" and len(args) >= 2:
        check_replace(owner, args[0], args[1])


def bounded_filters(filters: dict[str, Any]) -> dict[str, Any]:
    """The environment's filters, each checking its arguments first (``center(10**10)``, ``batch``, ...)."""

    def wrap(name: str, fn: Any) -> Any:
        def bounded(*args: Any, **kwargs: Any) -> Any:
            values = args[1:] if hasattr(fn, "jinja_pass_arg") else args  # a context or environment first
            check_args(tuple(values[1:]), kwargs)
            if name == "format" and values:
                check_format(values[0])
            if name == "replace" and len(values) >= 3:
                check_replace(values[0], values[1], values[2])
            return fn(*args, **kwargs)

        for attr in ("jinja_pass_arg",):  # how Jinja knows to pass the context or eval context first
            if hasattr(fn, attr):
                setattr(bounded, attr, getattr(fn, attr))
        return bounded

    return {name: wrap(name, fn) for name, fn in filters.items()}


def check_binop(operator: str, left: Any, right: Any) -> None:
    """Refuse ``*``, ``**``, ``+`` and ``%`` whose result would be oversized, before Python builds it."""
    if operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
        if right * max(abs(left).bit_length(), 1) > MAX_INT_BITS:
            raise too_costly(f"{left} ** {right} is over {MAX_INT_BITS} bits")
    elif operator == "*":
        if isinstance(left, int) and isinstance(right, int):
            if left.bit_length() + right.bit_length() > MAX_INT_BITS:
                raise too_costly(f"a product is over {MAX_INT_BITS} bits")
        else:
            sized, count = (left, right) if _sized(left) else (right, left)
            if isinstance(count, int) and _sized(sized) * count > MAX_VALUE:
                raise too_costly(f"a repetition makes over {MAX_VALUE} items")
    elif operator == "+" and _sized(left) + _sized(right) > MAX_VALUE:
        raise too_costly(f"a concatenation makes over {MAX_VALUE} items")
    elif operator == "%":
        check_format(left)


def bounded_namespace() -> type:
    """Jinja's ``namespace()``, refusing an oversized value: it is how a loop carries ``ns.s = ns.s ~ ns.s``."""
    from jinja2.utils import Namespace

    class Bounded(Namespace):
        def __setitem__(self, name: str, value: Any) -> None:
            if _sized(value) > MAX_VALUE:
                raise too_costly(f"a namespace value of {_sized(value)} items is over the {MAX_VALUE} limit")
            super().__setitem__(name, value)

    return Bounded
