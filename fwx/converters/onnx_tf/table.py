"""The op table: ONNX op type -> the function that emits its TensorFlow ops.

Filled by the ``ops_*`` modules on import (they import TensorFlow, so this
module itself stays light and ``supported_ops`` imports them on demand).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

Handler = Callable[[Any], Any]

OPS: dict[str, Handler] = {}
_MODULES = (
    "ops_control",
    "ops_elementwise",
    "ops_math",
    "ops_nn",
    "ops_spatial",
    "ops_shape",
    "ops_index",
    "ops_scatter",
    "ops_rnn",
    "ops_ml",
)


def op(*names: str) -> Callable[[Handler], Handler]:
    """Register one handler for one or more ONNX op types (refusing duplicates)."""

    def deco(fn: Handler) -> Handler:
        for name in names:
            if name in OPS:
                raise ValueError(f"ONNX op {name} already has a handler")
            OPS[name] = fn
        return fn

    return deco


def load_handlers() -> dict[str, Handler]:
    for mod in _MODULES:
        importlib.import_module(f"fwx.converters.onnx_tf.{mod}")
    return OPS


def supported_ops() -> list[str]:
    """Every ONNX op type (default domain) the translator handles."""
    return sorted(load_handlers())
