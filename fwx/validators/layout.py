"""Explicit layout transforms (NCHW <-> NHWC and friends) between runtimes.

Each runtime gets the same tensor in its own layout via ``np.transpose`` (never
``reshape``, which silently scrambles pixels); outputs come back to the
reference layout only when their shape says they are in the other one.
"""

from __future__ import annotations

import numpy as np

from fwx.formats import normalize_layout


def permutation(src: str | None, dst: str | None, ndim: int) -> tuple[int, ...] | None:
    """Axis order taking ``src`` layout to ``dst`` (e.g. NCHW->NHWC = (0, 2, 3, 1)), or None if no-op."""
    src, dst = normalize_layout(src), normalize_layout(dst)
    if not src or not dst or src == dst or len(src) != ndim or sorted(src) != sorted(dst):
        return None
    return tuple(src.index(c) for c in dst)


def to_layout(arr: np.ndarray, src: str | None, dst: str | None) -> np.ndarray:
    perm = permutation(src, dst, arr.ndim)
    return arr if perm is None else np.ascontiguousarray(arr.transpose(perm))


def inputs_to(sample: dict[str, np.ndarray], src: str | None, dst: str | None) -> dict[str, np.ndarray]:
    return {k: to_layout(v, src, dst) for k, v in sample.items()}


def output_back(
    cand: np.ndarray, ref_shape: tuple[int, ...], cand_layout: str | None, ref_layout: str | None
) -> np.ndarray:
    """Bring a candidate output to the reference layout when its shape shows it is transposed."""
    perm = permutation(cand_layout, ref_layout, cand.ndim)
    if perm is None:
        return cand
    moved = cand.transpose(perm)
    if cand.shape == ref_shape and moved.shape != ref_shape:
        return cand  # the artifact already returns the reference layout
    return np.ascontiguousarray(moved) if moved.shape == ref_shape else cand


def shape_to(shape: tuple[object, ...], src: str | None, dst: str | None) -> tuple[object, ...]:
    """A spec's shape seen in another layout (for comparing signatures)."""
    perm = permutation(src, dst, len(shape))
    return shape if perm is None else tuple(shape[i] for i in perm)
