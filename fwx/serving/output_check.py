"""The warm-up answer checked against the pinned signature: a model that contradicts its fwx.json is not served.

fwx.json is what clients read (model metadata, the request checks); a model
whose outputs come back in another rank or size would answer with shapes the
metadata denies. The warm-up inference is the one chance to see it before
traffic: every output's rank, each fixed size, and each size named by a symbol
the inputs bound (``N`` of ``x`` is 1 at warm-up, so ``N`` of ``y`` must be 1).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fwx.errors import InputError
from fwx.signature import Signature, TensorSpec, is_dynamic, shape_text


def _bound_symbols(sig: Signature, inputs: Mapping[str, np.ndarray]) -> dict[str, int]:
    bound: dict[str, int] = {}
    for spec in sig.inputs:
        for dim, size in zip(spec.shape, np.shape(inputs[spec.name]), strict=False):
            if isinstance(dim, str):
                bound.setdefault(dim, int(size))
    return bound


def _fits(spec: TensorSpec, shape: tuple[int, ...], bound: Mapping[str, int]) -> bool:
    if len(shape) != spec.rank:
        return False
    for dim, size in zip(spec.shape, shape, strict=True):
        if not is_dynamic(dim) and dim != size:
            return False
        if isinstance(dim, str) and bound.get(dim, size) != size:
            return False
    return True


def check_outputs(sig: Signature, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray]) -> None:
    """Raise ``InputError`` naming every output whose shape contradicts ``sig`` (for ``inputs``)."""
    bound = _bound_symbols(sig, inputs)
    wrong = [
        f"output {spec.name!r} came back {shape_text(np.shape(outputs[spec.name]), spec.name)}; "
        f"fwx.json pins {shape_text(spec.shape, spec.name)}"
        for spec in sig.outputs
        if spec.name in outputs and not _fits(spec, np.shape(outputs[spec.name]), bound)
    ]
    if wrong:
        raise InputError(
            "the warm-up outputs contradict the pinned signature: " + "; ".join(wrong),
            hint="the artifact does not match its fwx.json; re-export it",
        )
