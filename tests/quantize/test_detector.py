"""The shapes detector (samples/detector.py) end to end: five formats, NMS graphs, INT8 within 0.5 mAP.

Trained once for the module (~20-40 s on two cores) and exported with fwx to
all five formats. Its one output concatenates boxes (0..64 px) and scores
(0..1), so plain INT8 puts both on one scale and loses points of mAP@0.5
(pycocotools); the budget, scored by that mAP on one half of the eval images,
keeps the concatenation in float (TFLite: with the ops feeding it, which share
its scale) and the loss falls to <= 0.5 point there. On the half the search
never saw, the assertions are what holds on any CPU: plain INT8 still loses
more than the budget, and the published model loses less than plain INT8. NMS runs as a graph where the format has the op (ONNX
NonMaxSuppression appended to the model, TFLite NON_MAX_SUPPRESSION_V5) and
must return what the numpy ``samples.detector.nms`` returns.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fwx.formats import ARTIFACT_NAMES, Format
from fwx.quantize.data import Source
from fwx.quantize.evaluate import runtime_runner
from fwx.quantize.info import BudgetResult

pytest.importorskip("pycocotools")
pytestmark = pytest.mark.slow

FLOAT_FORMATS = (Format.TORCHSCRIPT, Format.PT2, Format.ONNX, Format.SAVEDMODEL, Format.TFLITE)


@dataclass
class Trained:
    version: Path  # fwx's published version folder: one artifact per format
    folder: Path
    eager_map: float
    eval_images: np.ndarray
    eval_labels: list[Any]
    score: Callable[..., float]
    calib: Source
    halves: Any  # samples.detector_int8.Halves

    def artifact(self, fmt: Format) -> Path:
        return self.version / ARTIFACT_NAMES[fmt]

    def run(self, fmt: Format, path: Path | None = None) -> tuple[Callable[..., Any], Callable[[], None]]:
        from samples.detector_int8 import SIGNATURE

        return runtime_runner(fmt, path or self.artifact(fmt), signature_hint=SIGNATURE)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    import torch

    from fwx.exporter.pipeline import export
    from samples import detector as det
    from samples.detector_int8 import write_data

    folder = tmp_path_factory.mktemp("detector")
    x, y = det.make_shapes(800, seed=0)
    xv, yv = det.make_shapes(300, seed=1)
    model = det.train(x, y, epochs=15)
    torch.save(model.state_dict(), folder / "detector.pt")
    opts = det.export_options(folder / "repo")
    res = export(folder / "detector.pt", ["all"], opts)
    assert res.ok, res.failures
    assert res.version_dir is not None
    score = det.map_scorer(xv, yv)
    eager = score(lambda feed: {"detections": det.predict_torch(model, feed["image"])})
    assert eager > 85  # it learned: INT8 numbers on an untrained detector say nothing
    calib, halves = write_data(folder, x[:200], xv, yv)
    return Trained(res.version_dir, folder, eager, xv, yv, score, calib, halves)


def test_all_five_formats_agree_in_float(trained: Trained) -> None:
    for fmt in FLOAT_FORMATS:
        run, close = trained.run(fmt)
        try:
            assert abs(trained.score(run) - trained.eager_map) <= 0.1, fmt
        finally:
            close()


def _reference(trained: Trained, fmt: Format, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The format's raw detections through the numpy NMS, padded as the graphs return it."""
    from samples import detector as det
    from samples.detector_nms import padded

    run, close = trained.run(fmt)
    try:
        return padded(det.nms(run({"image": images})["detections"]))
    finally:
        close()


def test_onnx_nms_in_the_graph_matches_the_numpy_nms(trained: Trained) -> None:
    import onnx
    import onnxruntime as ort

    from samples.detector_nms import append_onnx_nms

    path = append_onnx_nms(trained.artifact(Format.ONNX), trained.folder / "with_nms.onnx")
    assert "NonMaxSuppression" in {n.op_type for n in onnx.load(str(path)).graph.node}
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rows, count = sess.run(["nms", "count"], {"image": trained.eval_images})
    want_rows, want_count = _reference(trained, Format.ONNX, trained.eval_images)
    assert count.tolist() == want_count.tolist()
    assert want_count.sum() > len(want_count)  # several boxes per image: there was something to suppress
    np.testing.assert_allclose(rows, want_rows, atol=1e-4)
    blank = sess.run(["count"], {"image": np.zeros((2, 3, 64, 64), np.float32)})[0]
    assert blank.tolist() == [0, 0]


def test_tflite_and_savedmodel_nms_match_the_numpy_nms(trained: Trained) -> None:
    tf = pytest.importorskip("tensorflow")
    from ai_edge_litert.interpreter import Interpreter

    from samples.detector_nms import savedmodel_with_nms, tflite_nms

    path = tflite_nms(trained.folder / "nms.tflite")
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        tf.lite.experimental.Analyzer.analyze(model_path=str(path))
    assert "NON_MAX_SUPPRESSION_V5" in text.getvalue()  # the builtin, not a Flex op
    run, close = trained.run(Format.TFLITE)
    try:
        detections = run({"image": trained.eval_images})["detections"]
    finally:
        close()
    got = Interpreter(model_path=str(path)).get_signature_runner()(detections=detections)
    want_rows, want_count = _reference(trained, Format.TFLITE, trained.eval_images)
    assert got["count"].tolist() == want_count.tolist()
    np.testing.assert_allclose(got["nms"], want_rows, atol=1e-4)

    sm = savedmodel_with_nms(trained.artifact(Format.SAVEDMODEL), trained.folder / "with_nms.savedmodel")
    out = tf.saved_model.load(str(sm)).signatures["serving_default"](image=tf.constant(trained.eval_images[:50]))
    want_rows, want_count = _reference(trained, Format.SAVEDMODEL, trained.eval_images[:50])
    assert out["count"].numpy().tolist() == want_count.tolist()
    np.testing.assert_allclose(out["nms"].numpy(), want_rows, atol=1e-4)


def _check_split(result: BudgetResult, float_op: str) -> None:
    """What holds on any CPU: plain INT8 misses the budget on both halves, the search meets it on its own half
    by keeping the concatenation in float, and on the held-out half the published model loses less than plain."""
    assert result.plain["drop_points"] > 0.5  # plain INT8 misses the budget
    assert result.met
    assert result.final["drop_points"] <= 0.5
    assert float_op in [layer["op"] for layer in result.float_layers]
    held = result.holdout
    assert held["plain"]["drop_points"] > 0.5  # not the search half's luck: plain INT8 misses on unseen images too
    assert held["final"]["drop_points"] < held["plain"]["drop_points"]


def test_int8_onnx_plain_misses_half_a_point_the_budget_meets_it(trained: Trained) -> None:
    import onnxruntime as ort

    from samples import detector as det
    from samples.detector_int8 import onnx_int8
    from samples.detector_nms import append_onnx_nms, unpadded

    out = trained.folder / "int8.onnx"
    result = onnx_int8(trained.artifact(Format.ONNX), out, trained.calib, trained.halves)
    _check_split(result, "Concat")
    # the published INT8 model with NMS in its graph scores, on the held-out half, what the budget reported there
    held, reported = _held_out_map(trained, Format.ONNX, result)
    sess = ort.InferenceSession(
        str(append_onnx_nms(out, trained.folder / "int8_nms.onnx")), providers=["CPUExecutionProvider"]
    )
    rows, count = sess.run(["nms", "count"], {"image": trained.eval_images[held]})
    got = det.mean_ap(unpadded(rows, count), [trained.eval_labels[i] for i in held])
    assert abs(got - reported) <= 0.01


def test_int8_tflite_plain_misses_half_a_point_the_budget_meets_it(trained: Trained) -> None:
    pytest.importorskip("tensorflow")
    from ai_edge_litert.interpreter import Interpreter

    from samples import detector as det
    from samples.detector_int8 import tflite_int8
    from samples.detector_nms import tflite_nms, unpadded

    float_tflite, out = trained.artifact(Format.TFLITE), trained.folder / "int8.tflite"
    sm = trained.artifact(Format.SAVEDMODEL)
    result = tflite_int8(sm, float_tflite, out, trained.calib, trained.halves)
    _check_split(result, "CONCATENATION")
    assert result.size_final < result.size_int8 * 1.05  # a few ops in float; the weights stay int8
    held, reported = _held_out_map(trained, Format.TFLITE, result)
    run, close = trained.run(Format.TFLITE, out)
    try:
        detections = run({"image": trained.eval_images[held]})["detections"]
    finally:
        close()
    nms = Interpreter(model_path=str(tflite_nms(trained.folder / "nms.tflite"))).get_signature_runner()
    got = nms(detections=detections)
    assert (
        abs(det.mean_ap(unpadded(got["nms"], got["count"]), [trained.eval_labels[i] for i in held]) - reported) <= 0.01
    )


def _held_out_map(trained: Trained, fmt: Format, result: BudgetResult) -> tuple[list[int], float]:
    """The held-out images (half of the eval images, none searched on) and the published model's mAP there,
    as the budget reported it (the float artifact's mAP minus the reported held-out drop)."""
    held = list(trained.halves.split.holdout)
    assert result.split["holdout_samples"] == len(held) == len(trained.eval_images) // 2
    assert set(held).isdisjoint(trained.halves.split.search)
    run, close = trained.run(fmt)
    try:
        float_map = trained.halves.held_score(run)
    finally:
        close()
    return held, float_map - float(result.holdout["final"]["drop_points"])
