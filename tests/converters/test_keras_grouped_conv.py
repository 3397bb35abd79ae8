"""A Keras grouped convolution (``Conv2D(groups=...)``, ConvNeXt's depthwise stage), as keras.applications builds it.

Keras 3 runs a grouped convolution in a ``jit_compile`` function (TF's CPU
kernel has no groups), which grappler will not inline: tf2onnx left a
``StatefulPartitionedCall`` and ONNX, TorchScript and ``.pt2`` were skipped
naming it. fwx strips the no-inline marks for the conversion, so the call is
inlined into an ONNX ``Conv`` with ``group``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .every_format import export_to_every_format


@pytest.fixture(scope="module")
def grouped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import keras

    keras.utils.set_random_seed(0)
    x = keras.Input((8, 8, 4), name="image")
    h = keras.layers.Conv2D(8, 3, padding="same", groups=4)(x)  # 4 groups of one input channel each
    h = keras.layers.LayerNormalization()(keras.layers.Conv2D(8, 1)(h))
    y = keras.layers.Dense(3, name="y")(keras.layers.GlobalAveragePooling2D()(h))
    path = tmp_path_factory.mktemp("grouped") / "grouped.keras"
    keras.Model(x, y).save(path)
    return path


def test_a_grouped_conv_reaches_every_format(grouped: Path, tmp_path: Path) -> None:
    nodes = export_to_every_format(grouped, tmp_path, "grouped")
    assert "StatefulPartitionedCall" not in {n.op_type for n in nodes}
    assert any(n.op_type == "Conv" and any(a.name == "group" and a.i == 4 for a in n.attribute) for n in nodes)
