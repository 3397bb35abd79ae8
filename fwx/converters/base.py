"""One converter registry: every way fwx turns one format into another is an edge here.

Same-framework exports (PyTorch -> TorchScript) and cross-framework hops
(ONNX -> SavedModel) are the same kind of thing: a ``Converter`` keyed by
``(source, target)``. Edge modules are named ``<src>2<dst>.py`` and are
registered lazily (module path only), so the planner can reason about the
graph without importing torch or TensorFlow.
"""

from __future__ import annotations

import importlib
import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from fwx.errors import MissingDependencyError, UsageError
from fwx.formats import Format
from fwx.quantize.options import QuantOptions
from fwx.signature import Signature

#: ``--torchscript-mode``: auto = script, falling back to trace with a warning.
TORCHSCRIPT_MODES = ("auto", "script", "trace")


@dataclass(frozen=True)
class ConvertOptions:
    """What a user asks of every conversion of one export; each edge honours a declared subset.

    Only the user's choices: what a run learns (sample inputs, probe sizes)
    travels with each hop's ``SourceModel`` instead.
    """

    opset: int | None = None
    layout: str | None = None  # None = keep the source's layout; "nhwc"/"nchw" = force
    static_shapes: bool = False
    torchscript_mode: str = "auto"  # one of TORCHSCRIPT_MODES
    quant: QuantOptions | None = None  # None: no quantisation
    trust_model_code: bool = False
    saved_model_signature: str = "serving_default"

    def __post_init__(self) -> None:
        if self.torchscript_mode not in TORCHSCRIPT_MODES:
            raise UsageError(
                f"unknown --torchscript-mode {self.torchscript_mode!r}",
                hint=f"use one of: {', '.join(TORCHSCRIPT_MODES)}",
            )

    @property
    def quantize(self) -> str | None:
        """The quantisation kind asked for (``int8``, ``int8-dynamic``, ``fp16``), or None."""
        return self.quant.kind if self.quant is not None else None


@dataclass
class SourceModel:
    """What a hop consumes: a file/folder on disk, or (for eager sources) a live model, and the run's samples."""

    format: Format
    path: Path | None
    signature: Signature
    obj: Any = None  # loaded torch.nn.Module / keras.Model for eager sources
    layout: str | None = None
    opset: int | None = None
    precision: str = "fp32"
    sample_inputs: Mapping[str, Any] = field(default_factory=dict)  # name -> np.ndarray, for tracing/checks
    # the second probe sizes (symbol -> size; within a .pt2's Dim ranges), where a trace is checked to hold
    # its dynamic axes
    other_sizes: Mapping[str, int] = field(default_factory=dict)


@dataclass
class ConvertResult:
    """What a hop produced. ``signature`` is what the artifact should have (checked on read-back)."""

    path: Path
    signature: Signature
    tool: str
    tool_version: str = ""
    layout: str | None = None
    opset: int | None = None
    precision: str = "fp32"
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. quantization details for fwx.json


class Converter(ABC):
    """One edge of the conversion graph."""

    source: ClassVar[Format]
    target: ClassVar[Format]
    tool: ClassVar[str]
    #: Options this edge honours ("opset", "layout", "quantize", "dynamic", "static_shapes").
    honours: ClassVar[frozenset[str]] = frozenset()
    #: Importable modules the edge needs, with the pip extra that installs each.
    requires: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: Lower is preferred when two paths have the same length.
    cost: ClassVar[int] = 10
    #: A pure file -> file edge: it reads only ``src.path`` (never a live ``src.obj``) and options that travel
    #: as JSON (plus the sample inputs as arrays), and loading its input runs no code from it. The exporter may
    #: then run it in its prefetch process (``fwx.exporter.prefetch``) while it works on other targets.
    prefetchable: ClassVar[bool] = False

    @classmethod
    def missing(cls) -> list[tuple[str, str]]:
        return [(m, e) for m, e in cls.requires if importlib.util.find_spec(m) is None]

    @classmethod
    def check_available(cls) -> None:
        for module, extra in cls.missing():
            raise MissingDependencyError(module, extra, f"converting {cls.source} to {cls.target}")

    def precheck(self, src: SourceModel, opts: ConvertOptions) -> None:  # noqa: B027 - optional hook
        """Cheap check, before any heavy work, that the target can express the model.

        Raise ``UnsupportedOpsError`` listing every unsupported op at once.
        """

    @abstractmethod
    def convert(self, src: SourceModel, out: Path, opts: ConvertOptions) -> ConvertResult:
        """Write the target artifact at ``out`` (a file or folder path that does not exist yet)."""


@dataclass(frozen=True)
class EdgeEntry:
    source: Format
    target: Format
    module: str
    cls: str


_EDGES: dict[tuple[Format, Format], list[EdgeEntry]] = {}


def register_edge(source: Format, target: Format, module: str, cls: str) -> None:
    """Add an edge. Two tools may serve the same pair; the same module+class twice is refused."""
    entries = _EDGES.setdefault((source, target), [])
    entry = EdgeEntry(source, target, module, cls)
    if entry in entries:
        raise ValueError(f"edge {source}->{target} ({module}:{cls}) is already registered")
    entries.append(entry)


def edges() -> dict[tuple[Format, Format], list[EdgeEntry]]:
    return {k: list(v) for k, v in _EDGES.items()}


def edge_class(entry: EdgeEntry) -> type[Converter]:
    module = importlib.import_module(entry.module)
    cls: type[Converter] = getattr(module, entry.cls)
    return cls
