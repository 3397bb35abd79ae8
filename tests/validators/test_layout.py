"""Layout permutations are explicit transposes and outputs only move when their shape says so."""

from __future__ import annotations

import numpy as np

from fwx.validators.layout import output_back, permutation, shape_to, to_layout


def test_permutations() -> None:
    assert permutation("NCHW", "NHWC", 4) == (0, 2, 3, 1)
    assert permutation("NHWC", "NCHW", 4) == (0, 3, 1, 2)
    assert permutation("NCHW", "NCHW", 4) is None
    assert permutation(None, "NHWC", 4) is None
    assert permutation("NCHW", "NHWC", 2) is None  # a 2-D tensor is left alone


def test_transpose_is_not_reshape() -> None:
    x = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    y = to_layout(x, "NCHW", "NHWC")
    assert y.shape == (2, 4, 5, 3)
    assert y[1, 2, 3, 0] == x[1, 0, 2, 3]
    assert np.array_equal(to_layout(y, "NHWC", "NCHW"), x)
    assert shape_to(("N", 8, 8, 3), "NHWC", "NCHW") == ("N", 3, 8, 8)


def test_output_back_only_when_shape_says_so() -> None:
    nhwc = np.zeros((1, 6, 7, 4))
    assert output_back(nhwc, (1, 4, 6, 7), "NHWC", "NCHW").shape == (1, 4, 6, 7)
    already = np.zeros((1, 4, 6, 7))
    assert output_back(already, (1, 4, 6, 7), "NHWC", "NCHW") is already
    assert output_back(np.zeros((1, 5)), (1, 5), "NHWC", "NCHW").shape == (1, 5)
