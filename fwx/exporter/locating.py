"""After a target failed validation: name the node where it first leaves tolerance (``fwx.validators.locate``).

The reference is the source model, or, when the artifact was converted from
an ONNX file along its path (torch -> ONNX -> SavedModel -> TFLite, a float
ONNX before its INT8 copy), that file: the converters keep its node names
(fwx's ONNX->TF translator names TF ops after ONNX nodes), so tensors pair by
name rather than by shape. The intermediate is used only when it agrees with
the source on the traced samples; when it does not, the fault is already in
it, and it is located there against the source instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fwx.formats import Format
from fwx.runtimes.base import Runtime, load_runtime
from fwx.signature import Signature
from fwx.validators import validate_runtimes
from fwx.validators.locate import Side, locate
from fwx.validators.mismatch import Mismatch
from fwx.validators.report import ValidationReport


@dataclass(frozen=True)
class Intermediate:
    """An ONNX file written along the artifact's path."""

    path: Path
    tool: str
    layout: str | None


def locate_target(
    report: ValidationReport,
    key: str,
    *,
    source: Side,
    artifact: Side,
    intermediates: Sequence[Intermediate],
    samples: Sequence[dict[str, np.ndarray]],
    signature: Signature,
) -> None:
    """Set ``mismatch`` on the report's failed artifact ``key``; never raises (a failure is a note)."""
    art = next((a for a in report.artifacts if a.key == key), None)
    if art is None or art.passed or not art.outputs:
        return
    mid = intermediates[-1] if intermediates else None
    if mid is None:
        art.mismatch = locate(source, artifact, samples, signature=signature)
        return
    try:
        onnx_rt = load_runtime(Format.ONNX, mid.path)
    except Exception:  # noqa: BLE001 - an unreadable intermediate: compare with the source directly
        art.mismatch = locate(source, artifact, samples, signature=signature)
        return
    try:
        art.mismatch = _via(mid, onnx_rt, source, artifact, samples, signature)
    finally:
        onnx_rt.close()


def _via(
    mid: Intermediate,
    onnx_rt: Runtime,
    source: Side,
    artifact: Side,
    samples: Sequence[dict[str, np.ndarray]],
    signature: Signature,
) -> Mismatch:
    label = f"the intermediate ONNX written by {mid.tool}"
    side = Side(onnx_rt, label, mid.layout)
    check = validate_runtimes(
        source.runtime,
        {"onnx": onnx_rt},
        signature=signature,
        layouts={"onnx": mid.layout},
        reference_layout=source.layout,
        inputs=list(samples),  # every sample: the one that failed may be any of them
    )
    if check.passed:
        return locate(side, artifact, samples, signature=signature)
    found = locate(source, side, samples, signature=signature)
    found.within = label
    return found
