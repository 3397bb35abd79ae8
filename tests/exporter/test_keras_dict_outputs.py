"""A Keras model with dict outputs: every output is matched by its name, never by its position."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fwx.exporter import ExportOptions, export

keras = pytest.importorskip("keras")


def _dict_model() -> Any:
    """Keys in non-sorted order ("score" before "embed"), different widths so a swap cannot pass."""
    keras.utils.set_random_seed(0)
    inp = keras.Input((6,), name="x")
    h = keras.layers.Dense(8, activation="relu")(inp)
    return keras.Model(
        inp, {"score": keras.layers.Dense(1, name="score")(h), "embed": keras.layers.Dense(4, name="embed")(h)}
    )


@pytest.fixture(scope="module")
def dict_keras(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keras") / "dict.keras"
    _dict_model().save(path)
    return path


def test_the_keras_reference_returns_each_output_under_its_own_name() -> None:
    from fwx.runtimes.eager_keras import KerasRuntime
    from fwx.signature import Signature, TensorSpec

    model = _dict_model()
    pinned = Signature(
        (TensorSpec("x", "float32", ("N", 6)),),
        (TensorSpec("embed", "float32", ("N", 4)), TensorSpec("score", "float32", ("N", 1))),
    )
    rt = KerasRuntime.from_model(model, pinned)
    assert [(s.name, s.shape[1]) for s in rt.signature().outputs] == [("embed", 4), ("score", 1)]
    x = np.random.default_rng(0).standard_normal((3, 6)).astype(np.float32)
    got, want = rt.infer({"x": x}), model(x, training=False)
    for name in ("score", "embed"):
        np.testing.assert_allclose(got[name], np.asarray(want[name]), rtol=1e-6)


@pytest.mark.slow
def test_dict_outputs_reach_onnx_and_torchscript(dict_keras: Path, tmp_path: Path) -> None:
    res = export(dict_keras, ["onnx", "torchscript"], ExportOptions(out=tmp_path))
    assert res.ok
    assert sorted(res.manifest.artifacts) == ["onnx", "torchscript"]
    for entry in res.manifest.artifacts.values():
        assert entry.validation["passed"]
        assert entry.validation["outputs"]["embed"]["max_abs"] < 1e-4
