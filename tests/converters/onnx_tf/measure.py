"""Measure the translator on the test models: conversion seconds and max abs error vs onnxruntime.

Run from the repository root: ``.venv/bin/python -m tests.converters.onnx_tf.measure [--json out.json]``.
Prints the markdown table that docs/onnx_tf.md quotes.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")


def _err(got: dict[str, Any], ref: dict[str, Any]) -> float:
    import numpy as np

    return max(float(np.abs(np.asarray(got[k]) - v).max()) for k, v in ref.items())


def measure(name: str, exporter: str, folder: Path) -> dict[str, Any]:
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    from . import models
    from .test_models import convert, reference

    spec = models.SPECS[name]
    t0 = time.perf_counter()
    path = models.export(name, exporter, folder)
    t1, c1 = time.perf_counter(), time.process_time()
    res = convert(path, folder / f"{name}_{exporter}.savedmodel")
    t2, c2 = time.perf_counter(), time.process_time()
    conv = tf.lite.TFLiteConverter.from_saved_model(str(folder / f"{name}_{exporter}.savedmodel"))
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    flat = conv.convert()
    t3 = time.perf_counter()
    fn = tf.saved_model.load(str(folder / f"{name}_{exporter}.savedmodel")).signatures["serving_default"]
    runner = Interpreter(model_content=flat).get_signature_runner()
    rows = []
    for batch, seq in models.sizes(spec, exporter):
        feeds = models.feeds(spec, batch, seq)
        ref = reference(path, feeds)
        sm = {k: v.numpy() for k, v in fn(**{k: tf.constant(v) for k, v in feeds.items()}).items()}
        rows.append({"batch": batch, "seq": seq, "savedmodel": _err(sm, ref), "tflite": _err(runner(**feeds), ref)})
    return {
        "model": name,
        "exporter": exporter,
        "export_s": t1 - t0,
        "translate_s": t2 - t1,
        "translate_cpu_s": c2 - c1,
        "tflite_s": t3 - t2,
        "signature": str(res.signature),
        "sizes": rows,
        "tflite_bytes": len(flat),
    }


def main() -> None:
    from . import models

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in models.SPECS:
            for exporter in models.EXPORTERS:
                results.append(measure(name, exporter, Path(tmp)))
    print(
        "| model | exporter | sizes (batch, seq) | SavedModel max abs err | TFLite max abs err | "
        "fwx translate+save s (CPU s) | TFLite convert s |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results:
        sizes = "; ".join(f"({s['batch']}, {s['seq']})" if s["seq"] else f"({s['batch']})" for s in r["sizes"])
        sm = "; ".join(f"{s['savedmodel']:.1e}" for s in r["sizes"])
        tl = "; ".join(f"{s['tflite']:.1e}" for s in r["sizes"])
        print(
            f"| {r['model']} | {r['exporter']} | {sizes} | {sm} | {tl} | {r['translate_s']:.2f} ({r['translate_cpu_s']:.2f}) | "
            f"{r['tflite_s']:.2f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
