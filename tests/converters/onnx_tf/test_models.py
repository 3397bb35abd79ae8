"""End to end: torch -> ONNX (both exporters) -> fwx SavedModel -> TFLite, each checked against onnxruntime.

Checks that dynamic batch and sequence dims survive into the SavedModel signature
and the TFLite ``shape_signature`` (-1) and really resize, that int64 token ids stay
int64, and that the TFLite model needs builtin ops only (no Flex).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fwx.converters.base import ConvertOptions, SourceModel
from fwx.formats import Format

from . import models

tf = pytest.importorskip("tensorflow")
ort = pytest.importorskip("onnxruntime")
litert = pytest.importorskip("ai_edge_litert.interpreter")

ATOL, RTOL = 1e-4, 1e-3


def convert(path: Path, out: Path, **opts: Any) -> Any:
    from fwx.converters.onnx2savedmodel import OnnxToSavedModel
    from fwx.sources.readers import onnx_signature

    src = SourceModel(Format.ONNX, path, onnx_signature(path)[0])
    return OnnxToSavedModel().convert(src, out, ConvertOptions(**opts))


def to_tflite(saved_model: Path) -> bytes:
    conv = tf.lite.TFLiteConverter.from_saved_model(str(saved_model))
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]  # no Flex
    return bytes(conv.convert())


def reference(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))


def max_err(got: dict[str, Any], ref: dict[str, np.ndarray]) -> float:
    worst = 0.0
    for name, r in ref.items():
        y = np.asarray(got[name])
        assert y.shape == r.shape, f"{name}: shape {y.shape} != {r.shape}"
        np.testing.assert_allclose(y, r, atol=ATOL, rtol=RTOL, err_msg=name)
        worst = max(worst, float(np.abs(y - r).max()))
    return worst


@pytest.mark.slow
@pytest.mark.parametrize("exporter", models.EXPORTERS)
@pytest.mark.parametrize("name", list(models.SPECS))
def test_savedmodel_and_tflite_match_onnxruntime(
    name: str, exporter: str, tmp_path: Path, onnx_file: Callable[[str, str], Path]
) -> None:
    spec, path = models.SPECS[name], onnx_file(name, exporter)
    result = convert(path, tmp_path / "model.savedmodel")
    assert result.tool == "fwx-onnx-tf"
    assert tf.__version__ in result.tool_version

    fn = tf.saved_model.load(str(tmp_path / "model.savedmodel")).signatures["serving_default"]
    declared = fn.structured_input_signature[1]
    assert sorted(s.name for s in declared.values()) == sorted(n for n, _, _ in spec.inputs)
    assert sorted(fn.structured_outputs) == sorted(spec.outputs)
    for n, _, dtype in spec.inputs:
        ts = next(s for s in declared.values() if s.name == n)
        assert ts.dtype.name == dtype
        assert [i for i, d in enumerate(ts.shape.as_list()) if d is None] == sorted(spec.dynamic[n])

    runner = litert.Interpreter(model_content=to_tflite(tmp_path / "model.savedmodel")).get_signature_runner()
    for n, _, dtype in spec.inputs:
        detail = runner.get_input_details()[n]
        assert [i for i, d in enumerate(detail["shape_signature"]) if d == -1] == sorted(spec.dynamic[n])
        assert detail["dtype"] == np.dtype(dtype)  # int64 token ids stay int64

    for batch, seq in models.sizes(spec, exporter):
        feeds = models.feeds(spec, batch, seq)
        ref = reference(path, feeds)
        max_err({k: v.numpy() for k, v in fn(**{k: tf.constant(v) for k, v in feeds.items()}).items()}, ref)
        max_err(runner(**feeds), ref)
