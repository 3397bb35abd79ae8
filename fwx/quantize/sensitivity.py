"""Which layers INT8 hurts most: per-layer error between float and INT8 activations.

Both rankings use the frameworks' maintained debuggers and report a
signal-to-quantisation-noise ratio (SQNR, dB; lower = noisier):

* ONNX: ``onnxruntime.quantization.qdq_loss_debug`` runs the float and the QDQ
  model with every activation exposed as an output, and gives each activation's
  SQNR against the float model. That error accumulates down the graph, so a
  node is scored by what it *adds*: the SQNR of its noisiest input minus that of
  its output (the layers right after a noisy one would otherwise all look bad).
* TFLite: ``tf.lite.experimental.QuantizationDebugger`` on a model quantised
  with NumericVerify ops, which compare each quantised op's output with the same
  op run in float on the same (dequantised) inputs: a local error, so the
  SQNR itself ranks the op. Ops that only move data (pooling, reshapes) add no
  error and are not candidates.

The names returned are the ones the quantisers accept back: ONNX node names
for ``nodes_to_exclude``, TFLite output tensor names for ``denylisted_nodes``.
"""

from __future__ import annotations

import csv
import io
import math
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from fwx.quantize.budget import Layer
from fwx.quiet import quiet

ONNX_RANKING = "SQNR lost per node, float vs QDQ activations (onnxruntime qdq_loss_debug)"
TFLITE_RANKING = "SQNR per op, NumericVerify (tf.lite QuantizationDebugger)"
#: Samples the rankings run on: enough to rank, few enough to keep every activation in memory.
RANK_SAMPLES = 32
_NOISELESS = 1e-12


def _sqnr(signal: float, noise: float) -> float:
    if noise <= _NOISELESS:
        return math.inf
    return 10.0 * math.log10(max(signal, _NOISELESS) / noise)


def onnx_ranking(float_path: Path, qdq_path: Path, batches: Iterable[dict[str, np.ndarray]]) -> list[Layer]:
    """Nodes of ``float_path`` (the pre-processed float model) ordered by the SQNR they lose, worst first."""
    import onnx
    from onnxruntime.quantization.qdq_loss_debug import (
        collect_activations,
        compute_activation_error,
        create_activation_matching,
        modify_model_output_intermediate_tensors,
    )

    feeds = list(batches)
    with tempfile.TemporaryDirectory(prefix="fwx-sens-") as tmp, quiet(native=True):
        aug_f, aug_q = Path(tmp) / "float.onnx", Path(tmp) / "qdq.onnx"
        modify_model_output_intermediate_tensors(str(float_path), str(aug_f))
        modify_model_output_intermediate_tensors(str(qdq_path), str(aug_q))
        acts_f = collect_activations(str(aug_f), iter(feeds))
        acts_q = collect_activations(str(aug_q), iter(feeds))
    errors = compute_activation_error(create_activation_matching(acts_q, acts_f))
    sqnr = {name: float(e["xmodel_err"]) for name, e in errors.items() if "xmodel_err" in e}
    nodes = list(onnx.load(str(float_path)).graph.node)
    producer = {o: n for n in nodes for o in n.output}
    layers = []
    for node in nodes:
        out = next((o for o in node.output if o in sqnr), None)
        if out is None or not node.name:
            continue
        group = _fused_chain(node, producer, sqnr)
        ins = [sqnr[i] for n in group for i in n.input if i in sqnr]
        lost = (min(ins) if ins else math.inf) - sqnr[out]
        head = group[0]
        score = lost if math.isfinite(lost) else -sqnr[out]
        layers.append(Layer(head.name, head.op_type, score, tuple(n.name for n in group[1:])))
    return sorted(layers, key=lambda layer: -layer.score)


def _fused_chain(node: Any, producer: dict[str, Any], sqnr: dict[str, float]) -> list[Any]:
    """``node`` with the producers it is fused with (no QDQ between them: Conv -> Relu), first first."""
    chain = [node]
    while True:
        feeds = [producer[i] for i in chain[0].input if i in producer and i not in sqnr]
        if len(feeds) != 1 or not feeds[0].name:
            return chain
        chain.insert(0, feeds[0])


class TFLiteRequantizer:
    """Quantise a calibrated TFLite model again with some ops denylisted, without calibrating again.

    ``calibrated`` is the converter's output with ``_experimental_calibrate_only``
    (float ops plus recorded ranges); ``mlir_quantize`` is the same step the
    converter itself runs after calibrating (TF 2.21 ``lite.py``, ``_quantize``).
    """

    def __init__(self, calibrated: bytes, *, per_channel: bool, io_dtype: str) -> None:
        self.calibrated = calibrated
        self.per_channel = per_channel
        self.io_dtype = io_dtype

    def quantize(self, denylisted: Sequence[str] = (), *, verify: bool = False) -> bytes:
        import tensorflow as tf
        from tensorflow.lite.python import convert

        io_type = {"int8": tf.int8, "uint8": tf.uint8, "float32": tf.float32}[self.io_dtype]
        with quiet(native=True):
            data: bytes = convert.mlir_quantize(
                self.calibrated,
                disable_per_channel=not self.per_channel,
                input_data_type=tf.float32 if verify else io_type,
                output_data_type=tf.float32 if verify else io_type,
                enable_numeric_verify=verify,
                denylisted_nodes=list(denylisted) or None,
            )
        return data

    def write(self, denylisted: Sequence[str], dest: Path) -> None:
        dest.write_bytes(self.quantize(denylisted))


def _noise(f: np.ndarray, q: np.ndarray, scale: float, zero_point: int) -> float:
    return float(np.mean((f - (q.astype(np.float32) - zero_point) * scale) ** 2))


def _signal(f: np.ndarray, q: np.ndarray, scale: float, zero_point: int) -> float:
    return float(np.mean(np.square(f, dtype=np.float64)))


def tflite_ranking(
    requantizer: TFLiteRequantizer, dataset: Callable[[], Iterable[Sequence[np.ndarray]]]
) -> list[Layer]:
    """Ops of the calibrated model ordered by their local SQNR, worst first.

    ``dataset`` yields one list of arrays per sample, in the model's input order.
    """
    import tensorflow as tf

    options = tf.lite.experimental.QuantizationDebugOptions(
        layer_direct_compare_metrics={"noise": _noise, "signal": _signal}
    )
    with quiet(native=True):
        debugger = tf.lite.experimental.QuantizationDebugger(
            quant_debug_model_content=requantizer.quantize(verify=True), debug_dataset=dataset, debug_options=options
        )
        debugger.run()
        buf = io.StringIO()
        debugger.layer_statistics_dump(buf)
    layers = []
    for row in csv.DictReader(io.StringIO(buf.getvalue())):
        noise = float(row["noise"])
        if noise > _NOISELESS:
            layers.append(Layer(row["tensor_name"], row["op_name"], -_sqnr(float(row["signal"]), noise)))
    ranked = sorted(layers, key=lambda layer: -layer.score)
    floor = min((layer.score for layer in ranked), default=0.0) - 1.0
    return ranked + [replace(group, score=floor) for group in concat_groups(requantizer.calibrated)]


def concat_groups(calibrated: bytes) -> list[Layer]:
    """Each CONCATENATION with the ops that feed it, as one layer to keep in float.

    TFLite's int8 CONCATENATION takes one scale for its inputs and output, so
    the quantiser gives every input the widest range among them (a detector's
    0..1 scores take the 0..64 px boxes' scale). The debugger sees no error in
    the concatenation itself, and keeping either it or a producer alone in
    float changes nothing: only the group does.
    """
    from ai_edge_litert.interpreter import Interpreter

    interp: Any = Interpreter(model_content=calibrated)
    tensors = {t["index"]: t for t in interp.get_tensor_details()}
    ops = interp._get_ops_details()
    producer = {o: op for op in ops for o in op["outputs"]}
    groups = []
    for op in ops:
        out = tensors[op["outputs"][0]] if len(op["outputs"]) == 1 else None
        if op["op_name"] != "CONCATENATION" or out is None or out["dtype"] != np.float32:
            continue  # int shape arithmetic is not quantised
        feeds = [tensors[producer[i]["outputs"][0]]["name"] for i in op["inputs"] if i in producer]
        groups.append(Layer(out["name"], "CONCATENATION", 0.0, tuple(dict.fromkeys(feeds))))
    return groups


def tflite_input_order(model: bytes) -> list[str]:
    """The names of a TFLite model's inputs in the order the debugger feeds them."""
    from ai_edge_litert.interpreter import Interpreter

    interp: Any = Interpreter(model_content=model)
    return [d["name"] for d in interp.get_input_details()]
