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


def test_a_time_distributed_layer_over_a_dynamic_time_axis_is_refused_with_why(tmp_path: Path) -> None:
    """Keras 3's TimeDistributed, traced with an unknown time axis, maps over the batch size: every traced
    artifact came out ``[batch, batch, 3]`` and each target failed validation with a shape mismatch. The
    export now says why before any work; the same layers without the wrapper export and validate."""
    import tensorflow as tf

    from fwx.errors import InputError

    keras.utils.set_random_seed(0)
    x = keras.Input((None, 8), name="x")
    h = keras.layers.GRU(8, return_sequences=True)(x)
    wrapped = keras.Model(x, keras.layers.TimeDistributed(keras.layers.Dense(3), name="td")(h))
    traced = tf.function(lambda a: wrapped(a, training=False)).get_concrete_function(
        tf.TensorSpec([None, None, 8], tf.float32)
    )
    sample = np.zeros((2, 5, 8), np.float32)
    assert tuple(traced(tf.constant(sample)).shape) == (2, 2, 3)  # the Keras bug itself: 2 steps, not 5
    wrapped.save(tmp_path / "td.keras")
    with pytest.raises(InputError) as err:
        export(tmp_path / "td.keras", ["onnx"], ExportOptions(out=tmp_path / "a"))
    assert "TimeDistributed layer 'td'" in err.value.message
    assert "drop the wrapper" in (err.value.hint or "")
    keras.Model(x, keras.layers.Dense(3, name="y")(h)).save(tmp_path / "plain.keras")
    assert export(tmp_path / "plain.keras", ["onnx"], ExportOptions(out=tmp_path / "b")).ok


def test_a_fixed_time_length_pinned_on_a_keras_sequence_model_fixes_its_outputs(tmp_path: Path) -> None:
    """The model declares ``y: [N, None, 3]``; pinned at ``x: [N, 6, 4]`` its artifacts say ``[N, 6, 3]``, and
    the pinned signature must say so too (it kept the model's dynamic axis, so every artifact was refused on
    read-back). Without a pin the axis stays dynamic under the model's own name."""
    keras.utils.set_random_seed(0)
    x = keras.Input((None, 4), name="x")
    keras.Model(x, keras.layers.Dense(3, name="y")(keras.layers.Conv1D(5, 3, padding="same")(x))).save(
        tmp_path / "seq.keras"
    )
    pinned = export(tmp_path / "seq.keras", ["onnx"], ExportOptions(out=tmp_path / "a", inputs=["x:float32[N,6,4]"]))
    assert pinned.ok, pinned.failures
    assert pinned.signature.outputs[0].shape == ("N", 6, 3)
    free = export(tmp_path / "seq.keras", ["onnx"], ExportOptions(out=tmp_path / "b"))
    assert free.ok, free.failures
    assert free.signature.outputs[0].shape == ("N", "y_d1", 3)


def test_a_fully_convolutional_keras_model_is_probed_at_sizes_its_pooling_divides(tmp_path: Path) -> None:
    """A U-Net over ``(None, None, 3)`` concatenates a pooled-then-upsampled map with the input-size one, so
    fwx's small probe sizes (odd heights) failed pinning: "the signature ... does not fit". The probe now
    retries an image's height and width at multiples of 32; those sizes drive validation and go to
    fwx.json, and the dims stay dynamic."""
    from fwx.manifest import Manifest

    keras.utils.set_random_seed(0)
    x = keras.Input((None, None, 3), name="image")
    a = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(x)
    b = keras.layers.Conv2D(4, 3, padding="same")(keras.layers.MaxPooling2D()(a))
    up = keras.layers.Conv2DTranspose(4, 2, strides=2)(b)
    y = keras.layers.Conv2D(2, 1, name="mask")(keras.layers.Concatenate()([up, a]))
    keras.Model(x, y).save(tmp_path / "unet.keras")
    res = export(tmp_path / "unet.keras", ["onnx"], ExportOptions(out=tmp_path / "repo"))
    assert res.ok, res.failures
    assert res.version_dir is not None
    assert res.signature.inputs[0].shape == ("N", "image_d1", "image_d2", 3)
    assert Manifest.read(res.version_dir).samples["sizes"] == {"image_d1": [32, 64], "image_d2": [64, 96]}
