"""Non-max suppression as a graph: the shapes detector's post-processing inside ONNX, SavedModel and TFLite.

fwx exports the detector's raw output (``detections [N, 64, 4 + C]``: boxes as
pixel corners and per-class scores, as YOLOv5 exports it) to every format.
NMS is then a second, tiny graph in the formats that have an NMS op:

* ONNX: ``NonMaxSuppression`` (opset >= 10; this tail needs 11 for Range,
  CumSum and ScatterND). ``append_onnx_nms`` joins it to an exported model
  (float or INT8 QDQ) with ``onnx.compose``: one model from image to boxes.
* TensorFlow: ``NonMaxSuppressionV5``, which the TFLite converter maps to the
  ``NON_MAX_SUPPRESSION_V5`` builtin. ``tflite_nms`` writes a TFLite model that
  takes the detector's output (float or INT8 detector alike);
  ``savedmodel_with_nms`` wraps an exported SavedModel into one from image to
  boxes.
* TorchScript and ``.pt2`` have no NMS op in core PyTorch: torchvision's
  ``torchvision::nms`` is a compiled custom op that has to be loaded into the
  process that runs the model (and the installed torchvision's compiled ops do
  not load with the installed torch). For those, NMS runs after the model, in
  whatever calls ``fwx serve``: ``samples.detector.nms`` in numpy.

All of them compute what ``samples.detector.nms`` does: each cell keeps its best
class (the first on a tie), scores below ``min_score`` are dropped, and greedy
NMS at IoU ``iou`` runs per class. Class-awareness is YOLOv5's trick: each
box is shifted by ``class x OFFSET`` so boxes of different classes never
overlap, and one single-class NMS does all classes in score order.

Outputs are padded per image so they stay aligned with the batch axis (a
server can batch and split them like any other output): ``nms [N, 64, 6]``
rows ``(x1, y1, x2, y2, score, class)`` in descending score order, zero past
``count [N]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from samples.detector import CLASSES, GRID, OUTPUT_NAME, SIZE

CELLS = GRID * GRID
#: Shift per class: boxes lie within [-SIZE/2, 1.5 SIZE], so classes 4 SIZE apart never overlap.
OFFSET = 4.0 * SIZE
NMS_OUTPUT, COUNT_OUTPUT = "nms", "count"
MIN_ONNX_OPSET = 11


def threshold(min_score: float) -> float:
    """The largest float32 below ``min_score``: ``score > it`` (ONNX, TF) is ``score >= min_score`` (numpy)."""
    return float(np.nextafter(np.float32(min_score), np.float32(0)))


def padded(rows: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``samples.detector.nms``'s per-image rows as the graphs return them: ``[N, 64, 6]`` and ``count [N]``."""
    out = np.zeros((len(rows), CELLS, 6), np.float32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out, np.array([len(r) for r in rows], np.int64)


def unpadded(nms: np.ndarray, count: np.ndarray) -> list[np.ndarray]:
    """The graphs' padded output back to one array of rows per image (what ``mean_ap`` takes)."""
    return [np.asarray(nms[i, : int(c)], np.float32) for i, c in enumerate(np.asarray(count).reshape(-1))]


# ---------------------------------------------------------------- ONNX


def onnx_nms_graph(*, iou: float = 0.5, min_score: float = 0.01, opset: int = 17, ir_version: int = 8) -> Any:
    """``detections [N, 64, 4+C]`` -> ``nms [N, 64, 6]``, ``count [N]``: ``NonMaxSuppression`` and bookkeeping."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if opset < MIN_ONNX_OPSET:
        raise ValueError(f"the NMS tail needs ONNX opset >= {MIN_ONNX_OPSET} (Range, CumSum, ScatterND), got {opset}")

    def const(name: str, value: Any, dtype: Any) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(value, dtype), name)

    c = len(CLASSES)
    inits = [
        const("nms/i0", [0], np.int64),
        const("nms/i4", [4], np.int64),
        const("nms/i_end", [4 + c], np.int64),
        const("nms/axis2", [2], np.int64),
        const("nms/offset", OFFSET, np.float32),
        const("nms/max_out", [CELLS], np.int64),
        const("nms/iou", [iou], np.float32),
        const("nms/score", [threshold(min_score)], np.float32),
        const("nms/col_b", [0], np.int64),
        const("nms/col_bi", [0, 2], np.int64),
        const("nms/zero", 0, np.int64),
        const("nms/one", 1, np.int64),
        const("nms/row_shape", [CELLS, 6], np.int64),
        const("nms/shape1", [1], np.int64),
        const("nms/axis0", [0], np.int64),
    ]
    n = helper.make_node
    nodes = [
        n("Slice", [OUTPUT_NAME, "nms/i0", "nms/i4", "nms/axis2"], ["nms/boxes"], name="nms/boxes"),
        n("Slice", [OUTPUT_NAME, "nms/i4", "nms/i_end", "nms/axis2"], ["nms/cls_scores"], name="nms/cls_scores"),
        n("ArgMax", ["nms/cls_scores"], ["nms/cls"], axis=2, keepdims=1, name="nms/argmax"),  # first on a tie
        n("GatherElements", ["nms/cls_scores", "nms/cls"], ["nms/best"], axis=2, name="nms/best"),
        n("Cast", ["nms/cls"], ["nms/clsf"], to=TensorProto.FLOAT, name="nms/clsf"),
        n("Mul", ["nms/clsf", "nms/offset"], ["nms/shift"], name="nms/shift"),
        n("Add", ["nms/boxes", "nms/shift"], ["nms/shifted"], name="nms/shifted"),
        n("Transpose", ["nms/best"], ["nms/scores"], perm=[0, 2, 1], name="nms/scores"),  # [N, 1, 64]
        n(
            "NonMaxSuppression",
            ["nms/shifted", "nms/scores", "nms/max_out", "nms/iou", "nms/score"],
            ["nms/selected"],  # [K, 3]: batch, class (always 0), box; by batch, then score
            name="nms/nms",
        ),
        n("Concat", ["nms/boxes", "nms/best", "nms/clsf"], ["nms/table"], axis=2, name="nms/table"),
        n("Gather", ["nms/selected", "nms/col_bi"], ["nms/bi"], axis=1, name="nms/bi"),
        n("GatherND", ["nms/table", "nms/bi"], ["nms/rows"], name="nms/rows"),  # [K, 6]
        # each row's place within its image: a running count of the rows of the same image
        n("Gather", ["nms/selected", "nms/col_b"], ["nms/b"], axis=1, name="nms/b"),  # [K, 1]
        n("Shape", [OUTPUT_NAME], ["nms/shape"], name="nms/shape"),
        n("Gather", ["nms/shape", "nms/zero"], ["nms/n"], axis=0, name="nms/n"),
        n("Range", ["nms/zero", "nms/n", "nms/one"], ["nms/images"], name="nms/images"),
        n("Equal", ["nms/b", "nms/images"], ["nms/is_image"], name="nms/is_image"),  # [K, N]
        n("Cast", ["nms/is_image"], ["nms/onehot"], to=TensorProto.INT64, name="nms/onehot"),
        n("CumSum", ["nms/onehot", "nms/zero"], ["nms/running"], name="nms/running"),
        n("GatherElements", ["nms/running", "nms/b"], ["nms/seen"], axis=1, name="nms/seen"),
        n("Sub", ["nms/seen", "nms/one"], ["nms/pos"], name="nms/pos"),
        n("Concat", ["nms/b", "nms/pos"], ["nms/where"], axis=1, name="nms/where"),
        n("Reshape", ["nms/n", "nms/shape1"], ["nms/n1"], name="nms/n1"),
        n("Concat", ["nms/n1", "nms/row_shape"], ["nms/out_shape"], axis=0, name="nms/out_shape"),
        n("ConstantOfShape", ["nms/out_shape"], ["nms/empty"], name="nms/empty"),
        n("ScatterND", ["nms/empty", "nms/where", "nms/rows"], [NMS_OUTPUT], name="nms/scatter"),
        _count_per_image(opset),
    ]
    graph = helper.make_graph(
        nodes,
        "detector_nms",
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["N", CELLS, 4 + c])],
        [
            helper.make_tensor_value_info(NMS_OUTPUT, TensorProto.FLOAT, ["N", CELLS, 6]),
            helper.make_tensor_value_info(COUNT_OUTPUT, TensorProto.INT64, ["N"]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version)
    onnx.checker.check_model(model, full_check=True)
    return model


def _count_per_image(opset: int) -> Any:
    """How many rows each image kept: the one-hot [K, N] summed over K (0 for an image that kept none)."""
    from onnx import helper

    if opset >= 13:  # axes became an input in opset 13
        return helper.make_node("ReduceSum", ["nms/onehot", "nms/axis0"], [COUNT_OUTPUT], keepdims=0, name="nms/count")
    return helper.make_node("ReduceSum", ["nms/onehot"], [COUNT_OUTPUT], axes=[0], keepdims=0, name="nms/count")


def append_onnx_nms(model_path: Path, out_path: Path, *, iou: float = 0.5, min_score: float = 0.01) -> Path:
    """The exported detector (float or QDQ) with the NMS tail joined to its ``detections``: image -> boxes."""
    import onnx
    from onnx import compose

    model = onnx.load(str(model_path))
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    tail = onnx_nms_graph(iou=iou, min_score=min_score, opset=opset, ir_version=model.ir_version)
    tail.ClearField("opset_import")
    tail.opset_import.extend(model.opset_import)  # merge_models wants the same imports on both sides
    merged = compose.merge_models(model, tail, io_map=[(OUTPUT_NAME, OUTPUT_NAME)])
    onnx.checker.check_model(merged)
    onnx.save(merged, str(out_path))
    return out_path


# ---------------------------------------------------------------- TensorFlow / TFLite


def tf_nms(detections: Any, *, iou: float = 0.5, min_score: float = 0.01) -> dict[str, Any]:
    """The same NMS in TF ops, one ``NonMaxSuppressionV5`` per image (``tf.map_fn``)."""
    import tensorflow as tf

    boxes, cls_scores = detections[..., :4], detections[..., 4:]
    cls = tf.cast(tf.argmax(cls_scores, axis=-1), tf.float32)  # first on a tie
    best = tf.reduce_max(cls_scores, axis=-1)
    table = tf.concat([boxes, best[..., None], cls[..., None]], axis=-1)
    shifted = boxes + cls[..., None] * OFFSET

    def one(args: tuple[Any, Any, Any]) -> tuple[Any, Any]:
        b, s, t = args
        idx, _, valid = tf.raw_ops.NonMaxSuppressionV5(
            boxes=b,
            scores=s,
            max_output_size=CELLS,
            iou_threshold=iou,
            score_threshold=threshold(min_score),
            soft_nms_sigma=0.0,
            pad_to_max_output_size=True,
        )
        keep = tf.cast(tf.range(CELLS) < valid, tf.float32)[:, None]
        return tf.gather(t, idx) * keep, tf.cast(valid, tf.int64)

    rows, count = tf.map_fn(one, (shifted, best, table), fn_output_signature=(tf.float32, tf.int64))
    return {NMS_OUTPUT: rows, COUNT_OUTPUT: count}


def _nms_module(batch: int | None, iou: float, min_score: float) -> Any:
    import tensorflow as tf

    class NMS(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([batch, CELLS, 4 + len(CLASSES)], tf.float32, name=OUTPUT_NAME)])
        def __call__(self, detections: tf.Tensor) -> dict[str, tf.Tensor]:
            return tf_nms(detections, iou=iou, min_score=min_score)

    return NMS()


def tflite_nms(out_path: Path, *, batch: int | None = None, iou: float = 0.5, min_score: float = 0.01) -> Path:
    """A TFLite model ``detections -> nms, count`` (``NON_MAX_SUPPRESSION_V5``), run after the detector's TFLite."""
    import tensorflow as tf

    module = _nms_module(batch, iou, min_score)
    conv = tf.lite.TFLiteConverter.from_concrete_functions([module.__call__.get_concrete_function()], module)
    out_path.write_bytes(conv.convert())
    return out_path


def savedmodel_with_nms(saved_model: Path, out_dir: Path, *, iou: float = 0.5, min_score: float = 0.01) -> Path:
    """fwx's exported SavedModel wrapped with the NMS: one SavedModel from ``image`` to ``nms``, ``count``."""
    import tensorflow as tf

    inner = tf.saved_model.load(str(saved_model))
    serve = inner.signatures["serving_default"]
    spec = next(iter(serve.structured_input_signature[1].values()))

    class WithNMS(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        @tf.function(input_signature=[tf.TensorSpec(spec.shape, spec.dtype, name="image")])
        def __call__(self, image: tf.Tensor) -> dict[str, tf.Tensor]:
            det = self.inner.signatures["serving_default"](image=image)[OUTPUT_NAME]
            return tf_nms(det, iou=iou, min_score=min_score)

    module = WithNMS()
    tf.saved_model.save(module, str(out_dir), signatures={"serving_default": module.__call__})
    return out_dir
