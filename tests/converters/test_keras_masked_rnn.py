"""A Keras RNN over a masked embedding (``Embedding(mask_zero=True)`` -> GRU), as text models are built.

Its loop keeps a ``TensorList`` whose element shape TFLite needs fixed: the
dynamic export fails with one line naming the op and what to do, and
``--static-shapes`` reaches TFLite. (tf2onnx writes the masked loop as an ONNX
``Loop``, which neither ONNX translator expresses: the torch targets are skipped
naming it.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fwx.converters.savedmodel2tflite import mlir_error


def test_the_converter_diagnostic_is_read_past_its_location() -> None:
    text = (
        '<unknown>:0: error: loc(callsite(fused["TensorListReserve:", "gru/TensorArrayV2@fn"] at '
        'fused["StatefulPartitionedCall:", "x"])): \'tf.TensorListReserve\' op requires element_shape to be static\n'
        "<unknown>:0: note: see current operation"
    )
    assert mlir_error(RuntimeError(text)) == "'tf.TensorListReserve' op requires element_shape to be static"
    assert mlir_error(RuntimeError("plain failure\nmore")) == "plain failure"


@pytest.fixture(scope="module")
def masked_gru(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import keras

    keras.utils.set_random_seed(0)
    x = keras.Input((None,), dtype="int64", name="tokens")
    h = keras.layers.GRU(8)(keras.layers.Embedding(50, 8, mask_zero=True)(x))
    path = tmp_path_factory.mktemp("masked") / "masked_gru.keras"
    keras.Model(x, keras.layers.Dense(2, name="y")(h)).save(path)
    return path


def _export(src: Path, out: Path, **kw: object) -> object:
    from fwx import ui
    from fwx.converters.base import ConvertOptions
    from fwx.exporter import ExportOptions, export

    ui.state.quiet = True
    try:
        return export(src, ["tflite"], ExportOptions(out=out, name="gru", convert=ConvertOptions(**kw)))  # type: ignore[arg-type]
    finally:
        ui.state.quiet = False


@pytest.mark.slow
def test_a_masked_rnn_needs_static_shapes_for_tflite_and_says_so(masked_gru: Path, tmp_path: Path) -> None:
    from fwx.errors import FwxError

    with pytest.raises(FwxError) as err:
        _export(masked_gru, tmp_path / "dynamic")
    assert "'tf.TensorListReserve' op requires element_shape to be static" in err.value.message
    assert "--static-shapes" in (err.value.hint or "")
    result = _export(masked_gru, tmp_path / "static", static_shapes=True)
    assert result.manifest.artifacts["tflite"].validation["passed"]  # type: ignore[attr-defined]
