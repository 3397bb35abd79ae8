"""The shapes detector (samples/detector.py): plain INT8 loses mAP, the mAP budget wins it back.

Its one output concatenates boxes (0..64 px) and scores (0..1), so one int8
range rounds every score to ~0.25 and plain INT8 loses points of mAP@0.5; the
budget, measured with pycocotools' mAP on held-out images, finds the layer to
keep in float (the final Concat) and the loss falls to <= 0.5 point.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fwx.formats import Format
from fwx.quantize.budget import Budget
from fwx.quantize.budget_fit import fit, measurer, rank_batches
from fwx.quantize.data import open_source
from fwx.quantize.evaluate import runtime_runner
from fwx.quantize.sensitivity import ONNX_RANKING, onnx_ranking
from fwx.quantize.stream import BatchStream
from fwx.signature import Signature, parse_tensor_spec

pytest.importorskip("pycocotools")
SIG = Signature((parse_tensor_spec("image:float32[N,3,64,64]"),), (parse_tensor_spec("detections:float32[N,64,7]"),))


@pytest.mark.slow
def test_detector_int8_onnx_within_half_a_map_point(tmp_path: Path) -> None:
    import torch
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    from samples import detector as det

    x, y = det.make_shapes(800, seed=0)
    xv, yv = det.make_shapes(300, seed=1)
    model = det.train(x, y, epochs=15)
    fp32 = tmp_path / "det.onnx"
    torch.onnx.export(
        model,
        (torch.zeros(1, 3, 64, 64),),
        str(fp32),
        input_names=["image"],
        output_names=["detections"],
        opset_version=17,
        dynamo=False,
        dynamic_axes={"image": {0: "N"}, "detections": {0: "N"}},
    )
    np.savez(tmp_path / "calib.npz", image=x[:200])
    np.savez(tmp_path / "eval.npz", image=xv)
    calib = open_source(str(tmp_path / "calib.npz"), SIG, None)
    score = det.map_scorer(xv, yv)
    assert score(lambda feed: {"detections": det.predict_torch(model, feed["image"])}) > 85  # it learned

    def quantize(names: list[str], dest: Path) -> None:
        quantize_static(
            str(fp32),
            str(dest),
            BatchStream(calib, SIG, 200, 10),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=list(names),
        )

    out = tmp_path / "det.int8.onnx"
    quantize([], out)
    run_f, close_f = runtime_runner(Format.ONNX, fp32)
    run_q, close_q = runtime_runner(Format.ONNX, out)
    plain_drop = score(run_f) - score(run_q)
    close_f(), close_q()
    assert plain_drop > 0.5  # plain INT8 misses the budget

    src = open_source(str(tmp_path / "eval.npz"), SIG, None, purpose="eval")
    measure, close = measurer(Format.ONNX, fp32, src, SIG, scorer=score)
    try:
        result = fit(
            Budget(max_drop=0.5, metric="mAP@0.5"),
            out,
            quantize,
            measure,
            lambda: onnx_ranking(fp32, out, rank_batches(calib, SIG, 32)),
            ranked_by=ONNX_RANKING,
            data="eval",
        )
    finally:
        close()
    assert result.met
    assert result.final["drop_points"] <= 0.5
    assert [layer["op"] for layer in result.float_layers] == ["Concat"]
