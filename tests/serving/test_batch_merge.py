"""Pure merge/split along the batch axis."""

from __future__ import annotations

import numpy as np
import pytest

from fwx.errors import ServingError
from fwx.serving.batching.merge import merge, shape_key, split


def test_merge_then_split_returns_each_request() -> None:
    parts = [{"x": np.full((n, 2), i, np.float32)} for i, n in enumerate((1, 3, 2))]
    merged = merge(parts)
    assert merged["x"].shape == (6, 2)
    back = split({"y": merged["x"] * 10}, [1, 3, 2])
    for i, (p, b) in enumerate(zip(parts, back, strict=True)):
        np.testing.assert_array_equal(b["y"], p["x"] * 10, err_msg=f"request {i}")


def test_single_request_passes_through_uncopied() -> None:
    x = np.ones((2, 2))
    assert merge([{"x": x}])["x"] is x
    assert split({"y": x}, [2])[0]["y"] is x


def test_split_refuses_outputs_without_batch_axis() -> None:
    with pytest.raises(ServingError, match="does not split"):
        split({"y": np.ones(3)}, [2, 2])


def test_shape_key_ignores_batch_axis() -> None:
    assert shape_key({"x": np.ones((1, 5))}) == shape_key({"x": np.ones((7, 5))})
    assert shape_key({"x": np.ones((1, 5))}) != shape_key({"x": np.ones((1, 6))})
