"""Where a failed artifact first leaves tolerance: the data ``fwx.validators.locate`` measures.

Pure data (no framework, no numpy): the report, fwx.json, the terminal table
and the HTML page read it. ``ratio`` puts every node on one scale: the error
over what the tolerance allows (the atol a node needs over the atol it gets;
for an INT8 artifact judged by cosine, ``1 - cosine`` over ``1 - min cosine``),
so a node with ``ratio > 1`` is out of tolerance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class NodeError:
    """One compared node: its output in the artifact against the matching reference tensor."""

    node: str  # the node's name in the artifact
    op: str  # its op type in the artifact
    tensor: str  # the output tensor compared
    origin: str  # the source layer or module it came from ("" when unknown)
    reference: str  # the reference tensor, layer or module it was compared with
    max_abs: float
    cosine: float
    ratio: float  # error / what the tolerance allows: > 1 is out of tolerance
    allowed: str  # the tolerance it was judged by, in words
    inputs_ratio: float = 0.0  # the worst ratio among the compared nodes it reads from (0: none compared)

    @property
    def passed(self) -> bool:
        return self.ratio <= 1.0

    def describe(self) -> str:
        where = f", from {self.origin}" if self.origin else ""
        return f"{self.node!r} ({self.op}{where})"

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "op": self.op,
            "tensor": self.tensor,
            "origin": self.origin or None,
            "reference": self.reference,
            "max_abs": _num(self.max_abs),
            "cosine": _num(self.cosine),
            "ratio": _num(self.ratio),
            "allowed": self.allowed,
            "inputs_ratio": _num(self.inputs_ratio),
            "passed": self.passed,
        }


@dataclass
class Mismatch:
    """The first node out of tolerance in one failed artifact, and every node compared on the way."""

    reference: str  # what the intermediate tensors were compared with
    matched_by: str  # how artifact tensors were paired with reference tensors
    node: NodeError | None = None  # None: no compared node leaves tolerance (``note`` says why)
    layers: list[NodeError] = field(default_factory=list)  # every compared node, in the artifact's graph order
    note: str = ""
    within: str = ""  # where the node is when not in the artifact: an intermediate file it was converted from
    inserted: list[str] = field(default_factory=list)  # artifact nodes with no reference counterpart just before it
    removed: list[str] = field(default_factory=list)  # reference nodes with no artifact counterpart just before it
    samples: str = ""  # which samples were traced, in words

    def line(self) -> str:
        """The one line a user reads first."""
        if self.node is None:
            return f"no single node located: {self.note}" if self.note else "no single node located"
        n = self.node
        where = f" in {self.within}" if self.within else ""
        after = f" (after {', '.join(self.inserted)}, which the reference does not have)" if self.inserted else ""
        if self.removed:
            after += f" (the reference's {', '.join(self.removed)} before it is missing)"
        traced = f"; traced on {self.samples}" if self.samples else ""
        return (
            f"first node out of tolerance{where}: {n.describe()}{after}, max abs err {n.max_abs:.3g}, "
            f"cosine {n.cosine:.4f}, {_times(n.ratio)} what {n.allowed} allows (vs {self.reference}){traced}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node.node if self.node else None,
            "op": self.node.op if self.node else None,
            "origin": (self.node.origin or None) if self.node else None,
            "within": self.within or None,
            "reference": self.reference,
            "matched_by": self.matched_by,
            "note": self.note or None,
            "inserted": list(self.inserted),
            "removed": list(self.removed),
            "samples": self.samples or None,
            "first": self.node.to_json() if self.node else None,
            "layers": [n.to_json() for n in self.layers],
        }


def _times(ratio: float) -> str:
    return "infinitely past" if not math.isfinite(ratio) else f"{ratio:.3g}x"


def _num(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
