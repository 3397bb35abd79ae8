"""Other sizes are verified on the given sample's values, tiled (issue 12: Keras EfficientNet with preprocessing)."""

from __future__ import annotations

import numpy as np

from fwx.converters.onnx_torch.sample import tile_to
from fwx.signature import Signature, TensorSpec


def test_tile_to_repeats_and_cuts_only_dynamic_axes() -> None:
    sig = Signature(
        (TensorSpec("image", "float32", ("N", 2, 3)), TensorSpec("ids", "int64", ("N", "S"))),
        (TensorSpec("y", "float32", ("N",)),),
    )
    pixels = np.arange(12, dtype=np.float32).reshape(2, 2, 3) + 200.0  # a range noise would never hit
    ids = np.array([[5, 6, 7], [8, 9, 10]], np.int64)
    out = tile_to(sig, {"image": pixels, "ids": ids}, {"N": 5, "S": 2})
    assert out["image"].shape == (5, 2, 3)
    np.testing.assert_array_equal(out["image"][2:4], pixels)  # rows repeated in order
    assert out["image"].min() >= 200.0  # values stay in the given range
    np.testing.assert_array_equal(out["ids"], [[5, 6], [8, 9], [5, 6], [8, 9], [5, 6]])
    one = tile_to(sig, {"image": pixels, "ids": ids}, {"N": 1, "S": 3})
    np.testing.assert_array_equal(one["image"], pixels[:1])
