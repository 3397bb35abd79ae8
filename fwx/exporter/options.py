"""``ExportOptions``: everything one export is asked to do, in one frozen value.

``fwx export`` builds it from its flags; library callers build it directly.
``inputs`` are parsed when it is built, so a malformed ``--input`` fails
before anything is loaded.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fwx.converters.base import ConvertOptions
from fwx.errors import UsageError
from fwx.signature import TensorSpec, parse_tensor_spec
from fwx.sources.samples import InputConfig


@dataclass(frozen=True)
class ExportOptions:
    """Where to publish, how to pin the signature, how to convert and whether to validate."""

    out: str | Path = "artifacts"
    name: str | None = None
    version: int | None = None
    inputs: Sequence[str | TensorSpec] = ()
    outputs: Sequence[str] = ()
    example_inputs: str | Path | Mapping[str, Any] | None = None
    model_class: str | None = None
    model_kwargs: Mapping[str, Any] = field(default_factory=dict)
    convert: ConvertOptions = field(default_factory=ConvertOptions)
    validate: bool = True
    keep_failed: bool = False
    keep_intermediate: bool = False
    device: str = "cpu"
    command: str = ""
    input_ranges: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # --input-range NAME:LO,HI
    input_values: Mapping[str, tuple[float, ...]] = field(default_factory=dict)  # --input-values NAME:V1,V2
    validation_data: str | Path | None = None  # --validation-data: real samples validated beside generated ones
    task: str | None = None  # --task: what a Hugging Face folder exports (None: from its config)
    weights: str | Path | None = None  # --weights: a state_dict (safetensors or pickle) for a factory's module
    external_data: Path | None = None  # --external-data-dir: where a loose .onnx keeps its data (fwx.safety.snapshot)
    allow_signature_change: bool = False  # publish a version whose interface differs from the previous one
    prefetch: str | None = None  # auto | on | off (--prefetch); None: $FWX_PREFETCH, else DEFAULT_PREFETCH

    def __post_init__(self) -> None:
        specs = tuple(s if isinstance(s, TensorSpec) else parse_tensor_spec(s) for s in self.inputs)
        object.__setattr__(self, "inputs", specs)
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "model_kwargs", dict(self.model_kwargs or {}))
        InputConfig(ranges=self.input_ranges, values=self.input_values)  # an empty range fails here, before loading
        prefetch_mode(self.prefetch)

    def sample_config(self) -> InputConfig:
        """The user's ``--input-range`` / ``--input-values`` as the sample generator takes them."""
        return InputConfig(ranges=dict(self.input_ranges), values=dict(self.input_values))

    @property
    def specs(self) -> tuple[TensorSpec, ...]:
        return tuple(s for s in self.inputs if isinstance(s, TensorSpec))


PREFETCH_MODES = ("auto", "on", "off")
#: ``auto`` starts the helper only for inputs of 16 MiB or more, where the A/B measured a gain (docs/export.md).
DEFAULT_PREFETCH = "auto"


def prefetch_mode(value: str | None) -> str:
    """``--prefetch``'s value, or ``$FWX_PREFETCH`` when not given, else ``DEFAULT_PREFETCH``; others are refused."""
    text = (value if value is not None else os.environ.get("FWX_PREFETCH", "")).strip().lower() or DEFAULT_PREFETCH
    if text not in PREFETCH_MODES:
        where = "--prefetch" if value is not None else "FWX_PREFETCH"
        raise UsageError(f"{where} {text!r} is not one of auto, on, off", hint="use --prefetch auto|on|off")
    return text
