"""Positions a mask input switches off are not compared.

A model's outputs at padded positions (the hidden state of a padding token)
are whatever each runtime computes for nothing to attend to; they may
legitimately differ, and no user reads them. Where a sample holds a 2-D mask
input (0 = padding; an input the model uses as a mask, ``InputConfig.masks``, else one named ``*mask*``) whose shape is the leading ``[batch, seq]`` of
an output, both the reference and the candidate are set to 0 there before
they are compared, so a mismatch at a masked-out position never fails an export.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np

from fwx.sources.samples import is_mask


def hide_padding(
    ref: np.ndarray, cand: np.ndarray, sample: Mapping[str, np.ndarray], masks: Collection[str] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``ref`` and ``cand`` with the positions ``sample``'s masks switch off set to 0 (``masks``: None = by name)."""
    for name, mask in sample.items():
        m = np.asarray(mask)
        if (
            not (name in masks if masks is not None else is_mask(name))
            or m.ndim != 2
            or ref.ndim < 2
            or ref.shape[:2] != m.shape
            or cand.shape != ref.shape
        ):
            continue
        off = m == 0
        if off.any():
            ref, cand = ref.copy(), cand.copy()
            ref[off] = 0
            cand[off] = 0
    return ref, cand
