"""Keras 3 GRUs (``reset_after=True``, the default), as sequence models are built: stacked, bidirectional.

tf2onnx recognises Keras 2's GRU cell only, so a Keras 3 GRU came out as a
generic ONNX ``Loop``: TorchScript and ``.pt2`` were skipped naming ``Loop`` and
TFLite failed on ``TensorListReserve``. ``fwx.converters._keras3_gru`` matches
Keras 3's cell and writes one ONNX ``GRU`` per direction (merged into a
bidirectional one by tf2onnx), which every target takes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .every_format import export_to_every_format


@pytest.fixture(scope="module")
def stacked_gru(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import keras

    keras.utils.set_random_seed(0)
    x = keras.Input((None, 8), name="x")
    h = keras.layers.Bidirectional(keras.layers.GRU(8, return_sequences=True))(x)
    y = keras.layers.Dense(2, name="y")(keras.layers.GRU(4)(h))
    path = tmp_path_factory.mktemp("gru") / "stacked_gru.keras"
    keras.Model(x, y).save(path)
    return path


def test_a_keras3_gru_becomes_an_onnx_gru_and_reaches_every_format(stacked_gru: Path, tmp_path: Path) -> None:
    ops = [n.op_type for n in export_to_every_format(stacked_gru, tmp_path, "gru")]
    assert "Loop" not in ops
    assert ops.count("GRU") == 2  # the bidirectional layer as one node, then the second layer


def test_a_body_that_is_not_exactly_the_cell_is_left_a_loop() -> None:
    """The matcher checks every piece; a GRU over a masked embedding has ``Select``s in its body."""
    import keras
    import tensorflow as tf
    import tf2onnx

    from fwx.converters._onnx import tf2onnx_hooks

    keras.utils.set_random_seed(0)
    x = keras.Input((None,), dtype="int64", name="tokens")
    h = keras.layers.GRU(4)(keras.layers.Embedding(20, 4, mask_zero=True)(x))
    model = keras.Model(x, h)
    fn = tf.function(lambda t: model(t, training=False))
    spec = (tf.TensorSpec([None, None], tf.int64, name="tokens"),)
    with tf2onnx_hooks(tf2onnx):
        proto, _ = tf2onnx.convert.from_function(fn, input_signature=spec, opset=17)
    assert "Loop" in {n.op_type for n in proto.graph.node}
    assert tf2onnx.tfonnx.rewrite_gru_tf2.__module__.startswith("tf2onnx")  # the hook is undone
