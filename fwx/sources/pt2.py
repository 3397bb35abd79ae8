"""Reading a ``torch.export`` program's input signature as data.

Inputs that share a ``Dim`` (``input_ids`` and ``attention_mask`` share batch
and sequence) carry the same SymInt symbol in the program (``s43``); they get
the same pinned symbol, so samples, re-exports and artifacts keep them equal.
A symbol on a leading axis is the batch, ``N``; another keeps the name of the
first input axis that carries it (``input_ids_d1``). A dim that is an
expression of symbols (``2*s0``) is dynamic on its own.
"""

from __future__ import annotations

import re
from typing import Any

from fwx.digits import is_digits
from fwx.signature import BATCH, Dim, TensorSpec, normalize_dtype

_SYMBOL = re.compile(r"^[a-z]+\d+$")


def pt2_inputs(ep: Any) -> tuple[TensorSpec, ...] | None:
    """The user inputs of an ExportedProgram (SymInt dims become shared symbols), or None if unreadable."""
    names = list(ep.graph_signature.user_inputs)
    placeholders = [
        n for n in ep.graph.nodes if n.op == "placeholder" and n.name in names and hasattr(n.meta.get("val"), "shape")
    ]
    if len(placeholders) != len(names):
        return None
    shapes = [(n.name, n.meta["val"]) for n in placeholders]
    batch = {str(val.shape[0]) for _, val in shapes if val.shape and _SYMBOL.match(str(val.shape[0]))}
    chosen: dict[str, str] = dict.fromkeys(batch, BATCH) if len(batch) == 1 else {}
    inputs = []
    for name, val in shapes:
        dims: list[Dim] = []
        for axis, d in enumerate(val.shape):
            text = str(d)
            if is_digits(text.lstrip("-")):
                dims.append(int(text))
            elif _SYMBOL.match(text):
                dims.append(
                    chosen.setdefault(text, BATCH if axis == 0 and not chosen and not batch else f"{name}_d{axis}")
                )
            else:
                dims.append(f"{name}_d{axis}")
        inputs.append(TensorSpec(name, normalize_dtype(str(val.dtype)), tuple(dims)))
    return tuple(inputs)
