"""Keras preprocessing layers with state reach ONNX and the torch formats (issue 12 item 5).

``Normalization`` (given ``mean``/``variance`` or adapted) keeps its statistics
as plain tensors that the ``tf.function`` captures; tf2onnx turned each into an
extra graph input, so ONNX had inputs no caller can feed and TorchScript/.pt2
(made from that ONNX) were skipped. They must be frozen into the graph.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

HW = 12


@pytest.fixture(scope="module")
def preprocessing_keras(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import keras

    keras.utils.set_random_seed(0)
    x = keras.Input((HW, HW, 3), name="image")
    h = keras.layers.Rescaling(1.0 / 255)(x)
    h = keras.layers.Normalization(mean=[0.485, 0.456, 0.406], variance=[0.052, 0.050, 0.051])(h)
    adapted = keras.layers.Normalization()
    adapted.adapt(np.random.default_rng(0).uniform(-2, 2, (16, HW, HW, 3)).astype("float32"))
    h = adapted(h)
    h = keras.layers.Resizing(10, 10)(h)
    h = keras.layers.CenterCrop(8, 8)(h)
    h = keras.layers.Conv2D(4, 3, activation="relu")(h)
    y = keras.layers.Dense(3, name="logits")(keras.layers.GlobalAveragePooling2D()(h))
    path = tmp_path_factory.mktemp("prep") / "prep.keras"
    keras.Model(x, y).save(path)
    return path


@pytest.mark.slow
def test_stateful_preprocessing_layers_are_frozen_not_graph_inputs(preprocessing_keras: Path, tmp_path: Path) -> None:
    import onnx
    import onnxruntime as ort

    from fwx import ui
    from fwx.exporter import ExportOptions, export

    ui.state.quiet = True
    try:
        result = export(preprocessing_keras, ["onnx", "torchscript", "pt2"], ExportOptions(out=tmp_path, name="prep"))
    finally:
        ui.state.quiet = False
    assert result.ok, result.failures
    onnx_path = Path(result.version_dir) / result.manifest.artifacts["onnx"].path
    model = onnx.load(str(onnx_path))
    assert [i.name for i in model.graph.input] == ["image"]
    for target in ("onnx", "torchscript", "pt2"):
        assert result.manifest.artifacts[target].validation["passed"], target
    import keras

    pixels = np.random.default_rng(1).uniform(0, 255, (2, HW, HW, 3)).astype("float32")
    want = keras.saving.load_model(preprocessing_keras)(pixels).numpy()
    got = ort.InferenceSession(str(onnx_path)).run(None, {"image": pixels})[0]
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-3)
    assert np.abs(want).max() > 1e-3  # the statistics matter: a dropped mean/variance would change these


@pytest.mark.slow
def test_a_savedmodel_with_preprocessing_state_reaches_onnx(preprocessing_keras: Path, tmp_path: Path) -> None:
    """``model.export()`` restores Normalization's statistics as captured constants too."""
    import keras
    import onnx

    from fwx import ui
    from fwx.exporter import ExportOptions, export

    saved = tmp_path / "prep.savedmodel"
    keras.saving.load_model(preprocessing_keras).export(str(saved), verbose=False)
    ui.state.quiet = True
    try:
        result = export(saved, ["onnx"], ExportOptions(out=tmp_path / "repo", name="prep_sm"))
    finally:
        ui.state.quiet = False
    assert result.ok, result.failures
    entry = result.manifest.artifacts["onnx"]
    assert entry.validation["passed"]
    model = onnx.load(str(Path(result.version_dir) / entry.path))
    assert [i.name for i in model.graph.input] == ["image"]


def test_freeze_captures_leaves_a_model_without_extra_inputs_alone(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    from fwx.converters._freeze import freeze_captures

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    c = helper.make_tensor_value_info("c:0", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Add", ["x", "c:0"], ["y"])], "g", [x, c], [y])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), str(path))
    assert freeze_captures(path, {}, {"x"}) == []
    assert freeze_captures(path, {"c:0": np.array([2.0], np.float32)}, {"x"}) == ["c:0"]
    model = onnx.load(str(path))
    assert [i.name for i in model.graph.input] == ["x"]
    assert [i.name for i in model.graph.initializer] == ["c:0"]


def test_discretization_and_category_encoding_reach_every_format(tmp_path: Path) -> None:
    """The structured-data tutorial's bucketing: ``Discretization`` is TF ``Bucketize`` and ``CategoryEncoding``
    (multi_hot, count) is ``DenseBincount``; tf2onnx had no handler for the first and wrote the second with
    ``Unique``/``Compress``, so only a SavedModel came out. Judged on ages on and around every boundary."""
    import keras

    from fwx.exporter import ExportOptions, export
    from fwx.formats import Format
    from fwx.runtimes.base import load_runtime

    keras.utils.set_random_seed(0)
    age = keras.Input((3,), name="age")
    ids = keras.Input((4,), dtype="int64", name="ids")
    buckets = keras.layers.Discretization(bin_boundaries=[18.0, 30.0, 50.0])(age)
    multi = keras.layers.CategoryEncoding(num_tokens=4, output_mode="multi_hot")(buckets)
    count = keras.layers.CategoryEncoding(num_tokens=6, output_mode="count")(ids)
    y = keras.layers.Dense(2, name="y")(keras.layers.Concatenate()([multi, count]))
    model = keras.Model([age, ids], y)
    src = tmp_path / "tabular.keras"
    model.save(src)
    res = export(src, ["all"], ExportOptions(out=tmp_path / "repo"))
    assert sorted(res.manifest.artifacts) == ["onnx", "pt2", "savedmodel", "tflite", "torchscript"], res.failures
    # validation drew ages on every boundary and inside every bucket, not normal noise below 18
    assert res.manifest.samples["input_values"]["age"] == [17.0, 18.0, 24.0, 30.0, 40.0, 50.0, 51.0]
    feeds = {
        "age": np.array([[17.9, 18.0, 29.99], [30.0, 50.0, 80.0]], np.float32),
        "ids": np.array([[0, 5, 5, 2], [1, 1, 1, 1]], np.int64),
    }
    want = model.predict(feeds, verbose=0)
    for key, entry in res.manifest.artifacts.items():
        rt = load_runtime(Format(entry.format), res.version_dir / entry.path, signature_hint=res.signature)
        try:
            got = rt.infer(feeds)["y"]
        finally:
            rt.close()
        np.testing.assert_allclose(got, want, atol=1e-5, err_msg=key)
