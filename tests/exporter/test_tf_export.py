"""Keras and SavedModel sources -> SavedModel, ONNX, TFLite (TensorFlow is imported once per session)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fwx.errors import InputError
from fwx.exporter import ExportOptions, export
from fwx.sources.readers import onnx_signature, savedmodel_signature, tflite_signature

from .fixtures import assert_refused

pytestmark = pytest.mark.slow
TF_TARGETS = ["savedmodel", "onnx", "tflite"]


@pytest.fixture(scope="module")
def keras_all(keras_files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Any:
    return export(keras_files["keras"], TF_TARGETS, ExportOptions(out=tmp_path_factory.mktemp("repo")))


def test_keras_to_every_tf_target(keras_all: Any) -> None:
    m = keras_all.manifest
    assert sorted(m.artifacts) == ["onnx", "savedmodel", "tflite"]
    assert str(m.sig()) == "(image:float32[N,32,32,3]) -> (logits:float32[N,10])"
    for key, entry in m.artifacts.items():
        assert entry.validation["passed"] is True, (key, entry.validation)
        assert entry.layout == "nhwc"
        assert entry.sig().input_names == ["image"]
        assert entry.sig().output_names == ["logits"]
    assert m.artifacts["onnx"].opset == 17
    # TFLite is converted from the SavedModel target (reused, not converted twice).
    hops = m.artifacts["tflite"].hops
    assert [(h["source"], h["target"]) for h in hops] == [("keras", "savedmodel"), ("savedmodel", "tflite")]
    assert hops[0]["path"] == "model.savedmodel"


def test_artifacts_keep_names_and_dynamic_batch(keras_all: Any) -> None:
    d = keras_all.version_dir
    sm = savedmodel_signature(d / "model.savedmodel", "serving_default")
    assert str(sm) == "(image:float32[N,32,32,3]) -> (logits:float32[N,10])"
    tfl, meta = tflite_signature(d / "model.tflite")
    assert meta["signature_key"] == "serving_default"
    assert str(tfl) == "(image:float32[N,32,32,3]) -> (logits:float32[N,10])"
    onnx_sig, _ = onnx_signature(d / "model.onnx")
    assert str(onnx_sig) == "(image:float32[N,32,32,3]) -> (logits:float32[N,10])"


def test_renamed_io_and_kept_intermediate(keras_files: dict[str, Path], tmp_path: Path) -> None:
    res = export(
        keras_files["keras"],
        ["tflite"],
        ExportOptions(out=tmp_path, inputs=["img:float32[N,32,32,3]"], outputs=["probs"], keep_intermediate=True),
    )
    entry = res.manifest.artifacts["tflite"]
    kept = res.version_dir / entry.hops[0]["path"]
    assert entry.hops[0]["path"] == "intermediate/tflite/1/model.savedmodel"
    assert entry.hops[0]["sha256"]
    assert (kept / "saved_model.pb").is_file()
    assert str(savedmodel_signature(kept, "serving_default")) == "(img:float32[N,32,32,3]) -> (probs:float32[N,10])"
    assert str(tflite_signature(res.version_dir / "model.tflite")[0]).startswith("(img:float32[N,32,32,3])")
    assert entry.validation["passed"]
    assert not (res.version_dir / ".work").exists()


def test_legacy_h5_source(keras_files: dict[str, Path], tmp_path: Path) -> None:
    res = export(keras_files["h5"], ["onnx"], ExportOptions(out=tmp_path))
    assert res.manifest.artifacts["onnx"].validation["passed"]


def test_savedmodel_source(keras_files: dict[str, Path], tmp_path: Path) -> None:
    res = export(keras_files["savedmodel"], TF_TARGETS, ExportOptions(out=tmp_path, name="tfmod"))
    m = res.manifest
    assert str(m.sig()) == "(x:float32[N,8]) -> (y:float32[N,4])"
    assert m.artifacts["savedmodel"].hops[0]["tool"] == "copy"
    assert all(e.validation["passed"] for e in m.artifacts.values())
    assert m.source.format == "savedmodel"


def test_unknown_savedmodel_signature(keras_files: dict[str, Path], tmp_path: Path) -> None:
    from fwx.converters.base import ConvertOptions

    with pytest.raises(InputError, match="has no signature 'predict'.*serving_default"):
        export(
            keras_files["savedmodel"],
            ["onnx"],
            ExportOptions(out=tmp_path, convert=ConvertOptions(saved_model_signature="predict")),
        )


def test_onnx_source_is_copied_and_checked(keras_all: Any, tmp_path: Path) -> None:
    res = export(keras_all.version_dir / "model.onnx", ["onnx"], ExportOptions(out=tmp_path, name="again"))
    entry = res.manifest.artifacts["onnx"]
    assert entry.hops[0]["tool"] == "copy"
    assert entry.opset == 17
    assert entry.validation["passed"]


def test_lambda_layer_is_refused(cli: Any, keras_files: dict[str, Path], tmp_path: Path) -> None:
    res = cli("export", keras_files["lambda"], "--to", "savedmodel", "--out", tmp_path)
    assert_refused(res, tmp_path, 2, "Lambda layer")
    assert "--trust-model-code" in res.err


@pytest.mark.parametrize("script", [True, False], ids=["saved-from-a-script", "module-without-the-class"])
def test_keras_custom_class_that_cannot_be_rebuilt_is_named_with_the_way_out(
    cli: Any, tmp_path: Path, script: bool
) -> None:
    """A layer registered with ``register_keras_serializable`` in the saving script has no module in the
    file, and one whose module does not register it cannot be rebuilt either: the error names the class
    and the SavedModel route, never "corrupt"."""
    import keras

    @keras.saving.register_keras_serializable(package="fwxtest")
    class Scale(keras.layers.Layer):  # type: ignore[misc]
        def call(self, x: Any) -> Any:
            return x * 2.0

    if script:
        Scale.__module__ = "__main__"
    x = keras.Input((4,), name="x")
    path = tmp_path / "custom.keras"
    keras.Model(x, keras.layers.Dense(2)(Scale()(x))).save(path)
    keras.saving.get_custom_objects().pop("fwxtest>Scale")  # what another process sees
    res = cli("export", path, "--to", "onnx", "--out", tmp_path / "repo", "--trust-model-code")
    want = "defined in the script" if script else "could not rebuild its custom class(es) fwxtest>Scale (from "
    assert_refused(res, tmp_path / "repo", 2, want)
    assert "model.export(" in res.err
    assert "corrupt" not in res.err


def test_keras_input_that_does_not_fit(cli: Any, keras_files: dict[str, Path], tmp_path: Path) -> None:
    res = cli("export", keras_files["keras"], "--input", "image:float32[N,32,32]", "--to", "onnx", "--out", tmp_path)
    assert_refused(res, tmp_path, 2, "--input image:float32[N,32,32] does not fit")


def test_keras_op_missing_at_opset(cli: Any, tmp_path: Path) -> None:
    import keras

    x = keras.Input((4,), name="x")
    path = tmp_path / "cumsum.keras"
    keras.Model(x, keras.layers.Dense(2)(keras.ops.cumsum(x, axis=1))).save(path)
    res = cli("export", path, "--to", "onnx", "--opset", "10", "--out", tmp_path / "repo", "--json")
    assert_refused(res, tmp_path / "repo", 1, "ONNX opset 10 cannot express these ops: Cumsum")
    assert json.loads(res.out)["hint"].endswith("pass --opset 11")


def test_inspect_tf_formats_without_loading(cli: Any, keras_all: Any, keras_files: dict[str, Path]) -> None:
    d = keras_all.version_dir
    for path, fmt, extra in (
        (d / "model.tflite", "tflite", "signature_key"),
        (d / "model.savedmodel", "savedmodel", "tags"),
        (keras_files["keras"], "keras", "layer_types"),
    ):
        res = cli("inspect", path, "--json")
        assert res.code == 0, res.err
        info = json.loads(res.out)
        assert info["format"] == fmt
        assert extra in info["metadata"]
        assert info["signature"]["inputs"][0]["name"] == "image"
    lam = json.loads(cli("inspect", keras_files["lambda"], "--json").out)
    assert any("Lambda" in n for n in lam["notes"])


def test_example_inputs_drive_validation(keras_files: dict[str, Path], tmp_path: Path) -> None:
    feeds = tmp_path / "x.npz"
    np.savez(feeds, x=np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8))
    res = export(keras_files["savedmodel"], ["onnx"], ExportOptions(out=tmp_path / "repo", example_inputs=feeds))
    shapes = [s["x"]["shape"] for s in [res.reports["onnx"].inputs[0], res.reports["onnx"].inputs[1]]]
    assert shapes[0] == [2, 8]
    assert shapes[1][0] != 2


def test_erfc_is_exported_as_one_minus_erf(tmp_path: Path) -> None:
    """Keras' exact GELU lowers to Erfc, which tf2onnx has no handler for; fwx maps it to 1 - Erf."""
    import onnx
    import onnxruntime as ort
    import tensorflow as tf

    from fwx.converters._onnx import tf2onnx_convert
    from fwx.converters._tf import tf_function
    from fwx.converters.base import ConvertOptions, SourceModel
    from fwx.formats import Format
    from fwx.signature import Signature

    sig = Signature.from_json(
        {
            "inputs": [{"name": "x", "dtype": "float32", "shape": ["N", 5]}],
            "outputs": [{"name": "y", "dtype": "float32", "shape": ["N", 5]}],
        }
    )
    fn = tf_function(lambda x: {"y": tf.identity(tf.math.erfc(x), name="y")}, sig)
    res = tf2onnx_convert(fn, sig, SourceModel(Format.KERAS, None, sig), tmp_path / "erfc.onnx", ConvertOptions())
    assert {n.op_type for n in onnx.load(str(res.path)).graph.node} >= {"Erf", "Sub"}
    x = np.linspace(-3, 3, 10, dtype=np.float32).reshape(2, 5)
    got = ort.InferenceSession(str(res.path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, tf.math.erfc(x).numpy(), atol=1e-6)


def test_a_sequential_built_by_fit_keeps_a_dynamic_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A ``Sequential`` without ``Input`` records the first batch it saw (``fit`` on 32 rows: ``[32, 6]``);
    pinning that made every artifact take exactly 32 rows, where Keras' ``model.export()`` keeps the batch
    dynamic. A stateful RNN, which needs its batch, keeps it."""
    import keras
    import numpy as np

    from fwx.sources.load import load_source

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.layers.Dense(4, activation="relu"), keras.layers.Dense(2)])
    model.compile("adam", "mse")
    model.fit(np.zeros((32, 6), "float32"), np.zeros((32, 2), "float32"), batch_size=32, epochs=1, verbose=0)
    path = tmp_path / "fitted.keras"
    model.save(path)
    res = export(path, ["onnx", "tflite"], ExportOptions(out=tmp_path / "repo"))
    assert res.signature.inputs[0].shape == ("N", 6)  # Keras numbers the name (input_layer_2) per process
    assert res.signature.outputs[0].shape == ("N", 2)
    assert all(e.validation["passed"] for e in res.manifest.artifacts.values())
    assert f"records a fixed batch ({res.signature.inputs[0].name}:float32[32,6])" in capsys.readouterr().err
    x = keras.Input((5, 3), batch_size=4, name="x")
    stateful = tmp_path / "stateful.keras"
    keras.Model(x, keras.layers.LSTM(2, stateful=True)(x)).save(stateful)
    assert load_source(stateful).inputs[0].shape == (4, 5, 3)  # type: ignore[index]
