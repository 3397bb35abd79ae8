"""The shapes detector: mAP@0.5 per format in float, plain vs budgeted INT8, NMS in the graph.

Each run trains ``samples/detector.py`` from its own seed (800 training images,
15 epochs), exports it with ``fwx.exporter.export`` to all five formats and
scores every artifact on the same 300 held-out images (pycocotools mAP@0.5,
numpy NMS). INT8: ONNX QDQ (7-bit weights, fwx's default) and TFLite
full-integer, plain and under a 0.5 mAP point budget
(``samples/detector_int8.py``). The budget searches on 150 of the 300 images
(``fwx.quantize.split``, seed 0) and every INT8 figure is measured on the other
150, which the search never saw (``searched ...`` keys: the same on the half it
searched on); TFLite plain also with int8 I/O (fwx's default ``--io-dtype``).
NMS graphs, on the held-out 150: the ONNX model with ``NonMaxSuppression``
appended, the TFLite ``NON_MAX_SUPPRESSION_V5`` model run on the TFLite
detector's output, float and budgeted INT8. ``object worth`` is what one box
of the rarest class can move the held-out mAP by. Each figure is the median of
the runs with min and max.

    .venv/bin/python benchmarks/detector.py            # 3 runs, ~5 min on 2 cores
    .venv/bin/python benchmarks/detector.py --runs 5
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from _provenance import provenance, spread  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "detector.json"
FLOAT = ("torchscript", "pt2", "onnx", "savedmodel", "tflite")


def one_run(run: int, folder: Path, refusals: list[str]) -> dict[str, float]:
    """Every figure of one training seed: mAP points, and drops vs the eager model; a format whose budget
    search was refused gets its plain figures and ``int8 FORMAT refused`` (its reason in ``refusals``)."""
    import torch

    from fwx.exporter.pipeline import export
    from fwx.formats import ARTIFACT_NAMES, Format
    from fwx.quantize.budget import BudgetMissedError
    from fwx.quantize.evaluate import runtime_runner
    from samples import detector as det
    from samples.detector_int8 import SIGNATURE, onnx_int8, tflite_int8, write_data

    x, y = det.make_shapes(800, seed=10 * run)
    xv, yv = det.make_shapes(300, seed=1)
    t0 = time.perf_counter()
    model = det.train(x, y, epochs=15, seed=run)
    fig: dict[str, float] = {"train_s": time.perf_counter() - t0}
    torch.save(model.state_dict(), folder / "detector.pt")
    opts = det.export_options(folder / "repo")
    t0 = time.perf_counter()
    version = export(folder / "detector.pt", ["all"], opts).version_dir
    fig["export_s"] = time.perf_counter() - t0
    assert version is not None
    score = det.map_scorer(xv, yv)
    fig["eager"] = score(lambda feed: {"detections": det.predict_torch(model, feed["image"])})

    def scored(fmt: Format, path: Path) -> float:
        run_fn, close = runtime_runner(fmt, path, signature_hint=SIGNATURE)
        try:
            return score(run_fn)
        finally:
            close()

    for name in FLOAT:
        fig[f"float {name}"] = scored(Format(name), version / ARTIFACT_NAMES[Format(name)])
    calib, halves = write_data(folder, x[:200], xv, yv)
    held = list(halves.split.holdout)
    fig["object worth"] = halves.object_worth
    sm, ftfl = version / "model.savedmodel", version / "model.tflite"

    def held_scored(fmt: Format, path: Path, half: str = "held") -> float:
        run_fn, close = runtime_runner(fmt, path, signature_hint=SIGNATURE)
        try:
            return (halves.held_score if half == "held" else halves.search_score)(run_fn)
        finally:
            close()

    published: list[str] = []
    for fmt, fit, float_path in (
        (
            Format.ONNX,
            lambda: onnx_int8(version / "model.onnx", folder / "int8.onnx", calib, halves),
            version / "model.onnx",
        ),
        (Format.TFLITE, lambda: tflite_int8(sm, ftfl, folder / "int8.tflite", calib, halves), ftfl),
    ):
        t0 = time.perf_counter()
        try:
            fig |= _budget(fmt.value, fit(), time.perf_counter() - t0)
            published.append(fmt.value)
        except BudgetMissedError as exc:  # refused, as fwx refuses it: the file holds plain INT8, nothing kept
            plain = folder / f"int8.{fmt.value}"
            fig[f"int8 {fmt.value} plain"] = held_scored(fmt, float_path) - held_scored(fmt, plain)
            fig[f"searched {fmt.value} plain"] = held_scored(fmt, float_path, "search") - held_scored(
                fmt, plain, "search"
            )
            fig[f"int8 {fmt.value} refused"] = 1.0
            refusals.append(f"run {run} {fmt.value}: {exc.best} (best; budget missed by {exc.miss:.2f} pt)")

    int8_io = _tflite_int8_io(sm, calib, folder, lambda p: held_scored(Format.TFLITE, p))
    fig["int8 tflite int8-io plain"] = held_scored(Format.TFLITE, ftfl) - int8_io
    fig |= _nms(version, folder, xv[held], [yv[i] for i in held], published)
    return {k: round(v, 4) for k, v in fig.items()}


def _budget(fmt: str, r: Any, seconds: float) -> dict[str, float]:
    """Held-out figures first (what the docs quote), then the same two on the half the search chose on."""
    return {
        f"int8 {fmt} plain": r.holdout["plain"]["drop_points"],
        f"int8 {fmt} budget": r.holdout["final"]["drop_points"],
        f"searched {fmt} plain": r.plain["drop_points"],
        f"searched {fmt} budget": r.final["drop_points"],
        f"int8 {fmt} layers in float": len(r.float_layers),
        f"int8 {fmt} size cost %": 100 * (r.size_final - r.size_int8) / r.size_int8,
        f"int8 {fmt} seconds": seconds,
    }


def _tflite_int8_io(saved_model: Path, calib: Any, folder: Path, scored: Callable[[Path], float]) -> float:
    """Plain TFLite INT8 with int8 inputs and outputs: one scale for the boxes and the scores at the output."""
    from fwx.quantize.sensitivity import TFLiteRequantizer
    from samples.detector_int8 import _calibrated

    path = folder / "int8_io.tflite"
    TFLiteRequantizer(_calibrated(saved_model, calib), per_channel=True, io_dtype="int8").write([], path)
    return scored(path)


def _nms(version: Path, folder: Path, xv: np.ndarray, yv: Any, published: list[str]) -> dict[str, float]:
    """mAP from the NMS graphs: float and budgeted INT8 (where published), ONNX (one graph) and TFLite (detector,
    then NMS model)."""
    import onnxruntime as ort
    from ai_edge_litert.interpreter import Interpreter

    from fwx.formats import Format
    from fwx.quantize.evaluate import runtime_runner
    from samples import detector as det
    from samples.detector_int8 import SIGNATURE
    from samples.detector_nms import append_onnx_nms, tflite_nms, unpadded

    out: dict[str, float] = {}
    for label, src in (("float", version / "model.onnx"), ("int8 budget", folder / "int8.onnx")):
        if label != "float" and "onnx" not in published:
            continue
        path = append_onnx_nms(src, folder / f"nms_{label.replace(' ', '_')}.onnx")
        rows, count = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"image": xv})
        out[f"nms onnx {label}"] = det.mean_ap(unpadded(rows, count), yv)
    nms = Interpreter(model_path=str(tflite_nms(folder / "nms.tflite"))).get_signature_runner()
    for label, src in (("float", version / "model.tflite"), ("int8 budget", folder / "int8.tflite")):
        if label != "float" and "tflite" not in published:
            continue
        run_fn, close = runtime_runner(Format.TFLITE, src, signature_hint=SIGNATURE)
        try:
            got = nms(detections=run_fn({"image": xv})["detections"])
        finally:
            close()
        out[f"nms tflite {label}"] = det.mean_ap(unpadded(got["nms"], got["count"]), yv)
    return out


def _cpu() -> dict[str, Any]:
    """The CPU as fwx.json records it for an INT8 artifact (model, the INT8-relevant flags, kernel class)."""
    from fwx.quantize.cpu import features

    return features().to_json()


def table(runs: list[dict[str, float]]) -> str:
    lines = [f"{'figure':34}  {'median':>8}  {'min':>8}  {'max':>8}  runs", "-" * 70]
    for key, vals in _by_key(runs).items():
        s = spread(vals, 2)
        lines.append(f"{key:34}  {s['median']:8.2f}  {s['min']:8.2f}  {s['max']:8.2f}  {len(vals)}")
    return "\n".join(lines)


def _by_key(runs: list[dict[str, float]]) -> dict[str, list[float]]:
    """Each figure over the runs that have it (a refused budget has no published figures)."""
    keys = dict.fromkeys(k for r in runs for k in r)
    return {k: [r[k] for r in runs if k in r] for k in keys}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    from fwx import ui

    ui.state.quiet = True  # the export's step lines would bury the table
    runs: list[dict[str, float]] = []
    refusals: list[str] = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="bench-detector-") as tmp:
            runs.append(one_run(i, Path(tmp), refusals))
        print(f"run {i}: eager {runs[-1]['eager']:.2f} mAP@0.5", file=sys.stderr, flush=True)
    print(
        "shapes detector, mAP@0.5 points on 300 eval images (float rows); INT8 and NMS rows on the 150 of them the"
        " budget search never saw (INT8 rows: points lost vs the same format's float model)"
    )
    print(table(runs))
    for line in refusals:
        print(f"refused: {line}")
    result = {
        "provenance": provenance(),
        "what": "samples/detector.py: float mAP@0.5 per format on 300 eval images; INT8 drops (points vs the format's "
        "float model), plain and budgeted (max 0.5), searched on 150 and measured on the other 150 (split seed 0); "
        "mAP through the NMS graphs on the held-out 150",
        "cpu": _cpu(),
        "figures": {k: spread(v, 4) | {"runs": len(v)} for k, v in _by_key(runs).items()},
        "refused": refusals,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")


if __name__ == "__main__":
    main()
