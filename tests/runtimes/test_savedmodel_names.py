"""SavedModel inputs keep their real names even when TF rewrites the signature keys."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fwx.formats import Format
from fwx.runtimes import load_runtime


def test_non_identifier_input_name_roundtrips(tmp_path: Path) -> None:
    import tensorflow as tf

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="input-ids.0")])
        def serve(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"y": x * 2.0 + 1.0}

    m = M()
    tf.saved_model.save(m, str(tmp_path / "sm"), signatures={"serving_default": m.serve})
    rt = load_runtime(Format.SAVEDMODEL, tmp_path / "sm")
    assert rt.signature().input_names == ["input-ids.0"]
    out = rt.infer({"input-ids.0": np.array([[4.0, 0.0]], np.float32)})
    np.testing.assert_allclose(out["y"], [[9.0, 1.0]])
