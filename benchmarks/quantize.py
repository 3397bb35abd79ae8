"""Calibrated INT8 on the digits CNN: accuracy cost, size, calibration time and peak memory.

Trains samples/digits.py (seeded, a few seconds), writes its float ONNX model and
SavedModel, then quantises each configuration in a fresh subprocess so that
``ru_maxrss`` (the process's peak resident memory) belongs to that one run:

* ONNX int8 (QDQ) with minmax / entropy / percentile on 100 and 1000 calibration
  samples, and with random calibration data; int8-dynamic; fp16;
* the same entropy runs with stride-wise calibration switched off (ORT's default:
  every intermediate output of every sample held until the end) to show what the
  streaming reader + ``CalibStridedMinMax`` buys;
* TFLite full-integer int8 on 100 and 1000 samples, random; int8-dynamic; fp16.

Accuracy is top-1 on the 450-sample held-out split, for the float model and the
quantised one, through fwx's own runtimes (no budget here, so no split: every
row is plain quantisation measured on all 450). ONNX int8 weights are fwx's
default, 7-bit. Prints a table and writes ``benchmarks/results/quantize.json``
(with the date, commit, machine and the CPU's INT8 flags).

    .venv/bin/python benchmarks/quantize.py            # ~2-3 min on 2 cores
    .venv/bin/python benchmarks/quantize.py --quick    # ONNX only, 100 samples
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "quantize.json"

#: Accuracy table, digits CNN: (label, format, kind, method, samples, data, strided)
ACCURACY: list[tuple[str, str, str, str | None, int, str, bool]] = [
    ("onnx int8 minmax", "onnx", "int8", "minmax", 100, "calib", True),
    ("onnx int8 minmax", "onnx", "int8", "minmax", 1000, "calib", True),
    ("onnx int8 entropy", "onnx", "int8", "entropy", 1000, "calib", True),
    ("onnx int8 percentile", "onnx", "int8", "percentile", 1000, "calib", True),
    ("onnx int8 minmax, RANDOM calibration", "onnx", "int8", "minmax", 100, "random", True),
    ("onnx int8-dynamic", "onnx", "int8-dynamic", None, 0, "", True),
    ("onnx fp16", "onnx", "fp16", None, 0, "", True),
    ("tflite int8 (full integer)", "tflite", "int8", "minmax", 100, "calib", True),
    ("tflite int8 (full integer)", "tflite", "int8", "minmax", 1000, "calib", True),
    ("tflite int8, RANDOM calibration", "tflite", "int8", "minmax", 100, "random", True),
    ("tflite int8-dynamic", "tflite", "int8-dynamic", None, 0, "", True),
    ("tflite fp16", "tflite", "fp16", None, 0, "", True),
]
#: Memory table, wide CNN (large activations): calibration peak vs number of samples.
MEMORY: list[tuple[str, str, str, str | None, int, str, bool]] = [
    (f"{fmt} int8 {method}{'' if strided else ', ORT default (no stride)'}", fmt, "int8", method, n, "calib", strided)
    for fmt, method, strided in (
        ("onnx", "minmax", True),
        ("onnx", "entropy", True),
        ("onnx", "entropy", False),
        ("tflite", "minmax", True),
    )
    for n in (100, 1000)
]


def _load_digits() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("fwx_sample_digits", ROOT / "samples" / "digits.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prepare_digits(work: Path, with_tflite: bool) -> dict[str, Any]:
    """Train once, write the float artifacts and the data files."""
    digits = _load_digits()
    t0 = time.perf_counter()
    x_tr, y_tr, x_te, y_te = digits.load_split()
    model = digits.train(x_tr, y_tr)
    train_s = time.perf_counter() - t0
    calib, ev = digits.write_data(work, x_tr, x_te, y_te)
    onnx_path = digits.export_onnx(model, work / "digits.onnx")
    sm = digits.export_savedmodel(digits.to_keras(model), work / "digits.savedmodel") if with_tflite else None
    return {
        "train_seconds": round(train_s, 2),
        "train_samples": len(y_tr),
        "eval_samples": len(y_te),
        "params": int(sum(p.numel() for p in model.parameters())),
        "onnx": str(onnx_path),
        "savedmodel": str(sm) if sm else None,
        "calib": str(calib),
        "eval": str(ev),
        "onnx_input": "image:float32[N,1,8,8]",
        "tflite_input": "image:float32[N,1,8,8]",
        "float_accuracy": digits.accuracy(digits.predict_torch(model, x_te), y_te),
    }


def prepare_wide(work: Path, with_tflite: bool, n: int = 1000) -> dict[str, Any]:
    """Three 32-channel 3x3 convs at 32x32: ~128 KiB per activation per sample, so holding every
    intermediate output of 1000 samples (ORT's unstrided calibration) costs the better part of 1 GB."""
    import numpy as np
    import torch

    torch.manual_seed(0)
    layers: list[Any] = []
    for c_in in (3, 32, 32):
        layers += [torch.nn.Conv2d(c_in, 32, 3, padding=1), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    onnx_path = work / "wide.onnx"
    torch.onnx.export(
        model.eval(),
        (torch.zeros(1, 3, 32, 32),),
        str(onnx_path),
        input_names=["image"],
        output_names=["logits"],
        opset_version=17,
        dynamo=False,
        dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}},
    )
    x = np.random.default_rng(0).standard_normal((n, 3, 32, 32)).astype(np.float32)
    np.savez(work / "wide_nchw.npz", image=x)
    np.savez(work / "wide_nhwc.npz", image=x.transpose(0, 2, 3, 1))
    sm = _wide_savedmodel(work / "wide.savedmodel") if with_tflite else None
    return {
        "onnx": str(onnx_path),
        "savedmodel": str(sm) if sm else None,
        "eval": None,
        "calib_onnx": str(work / "wide_nchw.npz"),
        "calib_tflite": str(work / "wide_nhwc.npz"),
        "onnx_input": "image:float32[N,3,32,32]",
        "tflite_input": "image:float32[N,32,32,3]",
    }


def _wide_savedmodel(path: Path) -> Path:
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    inp = keras.Input((32, 32, 3), name="image")
    h = inp
    for _ in range(3):
        h = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(h)
    out = keras.layers.Dense(10)(keras.layers.GlobalAveragePooling2D()(h))
    model = keras.Model(inp, out)
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        "serving_default",
        lambda image: {"logits": model(image)},
        input_signature=[tf.TensorSpec([None, 32, 32, 3], tf.float32, name="image")],
    )
    archive.write_out(str(path), verbose=False)
    return path


def peak_rss_mb() -> float:
    """This process's peak resident memory: VmHWM (reset by exec, unlike ru_maxrss, which a child
    inherits from the parent it forked from), else ru_maxrss."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _warm_up(spec: dict[str, Any]) -> Any:
    """Import the quantiser and run its fixed-cost steps once, so the baseline excludes them
    (ORT's quant_pre_process alone peaks at ~240 MB here, whatever the sample count)."""
    if spec["format"] == "onnx":
        import onnxruntime.quantization  # noqa: F401
        from onnxruntime.quantization.shape_inference import quant_pre_process

        from fwx.quantize.onnx import quantize_onnx

        quant_pre_process(spec["onnx"], spec["out"] + ".warmup.onnx")
        return quantize_onnx, Path(spec["onnx"])
    import ai_edge_litert.interpreter  # noqa: F401
    import tensorflow  # noqa: F401

    from fwx.quantize.tflite import convert_quantized

    return convert_quantized, Path(spec["savedmodel"])


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One quantisation in this (fresh) process; report its receipt and peak memory."""
    from fwx.quantize import QuantOptions, stream
    from fwx.signature import Signature, parse_tensor_spec

    if not spec["strided"]:
        stream.MAX_SAMPLES_IN_FLIGHT = 10**9  # one stride = every batch: ORT's unstrided behaviour
    sig = Signature((parse_tensor_spec(spec[f"{spec['format']}_input"]),), (parse_tensor_spec("logits:float32[N,10]"),))
    quant: dict[str, Any] = {"eval_data": spec["eval"]} if spec["eval"] else {}
    if spec["kind"] == "int8":
        quant.update(
            calibration_data=spec["calib"] if spec["data"] == "calib" else "random",
            method=spec["method"],
            samples=spec["samples"],
        )
    run, src = _warm_up(spec)
    before = peak_rss_mb()
    t0 = time.perf_counter()
    info = run(src, Path(spec["out"]), sig, QuantOptions(spec["kind"], **quant))
    wall = time.perf_counter() - t0
    peak = peak_rss_mb()
    return {
        "info": info.to_json(),
        "rss_baseline_mb": round(before, 1),
        "rss_peak_mb": round(peak, 1),
        "rss_growth_mb": round(peak - before, 1),
        "wall_seconds": round(wall, 2),
    }


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow", "PYTHONHASHSEED": "0"}
    proc = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=900,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1][:300]}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def accuracy_row(label: str, res: dict[str, Any]) -> list[str]:
    if "error" in res:
        return [label, "-", "error", "", "", "", "", "", ""]
    info = res["info"]
    ev = info.get("eval") or {}
    return [
        label,
        str(info["samples"] or "-"),
        f"{ev.get('accuracy_float', 0) * 100:.2f}%",
        f"{ev.get('accuracy_quant', 0) * 100:.2f}%",
        f"{ev.get('drop_points', 0):+.2f}",
        f"{ev.get('cosine_min', 0):.4f}",
        f"{info['size_before'] / 1024:.0f} -> {info['size_after'] / 1024:.0f} KiB ({info['size_ratio']:.2f}x)",
        f"{info['calibration_seconds']:.2f}",
        f"{res['rss_peak_mb']:.0f}",
    ]


def memory_row(label: str, res: dict[str, Any]) -> list[str]:
    if "error" in res:
        return [label, "-", "error", "", "", ""]
    info = res["info"]
    return [
        label,
        str(info["samples"]),
        f"{info['calibration_seconds']:.2f}",
        f"{res['rss_baseline_mb']:.0f}",
        f"{res['rss_peak_mb']:.0f}",
        f"{res['rss_growth_mb']:+.0f}",
    ]


def _measure(section: str, configs: list[tuple[Any, ...]], base: dict[str, Any], work: Path) -> list[dict[str, Any]]:
    results = []
    for i, (label, fmt, kind, method, samples, data, strided) in enumerate(configs):
        calib = base.get("calib") or base[f"calib_{fmt}"]
        spec = {
            **base,
            "calib": calib,
            "format": fmt,
            "kind": kind,
            "method": method,
            "samples": samples,
            "data": data,
            "strided": strided,
            "out": str(work / f"{section}{i}.{fmt}"),
        }
        res = run_child(spec)
        print(
            f"  {section}: {label} ({samples or '-'} samples): "
            f"{res['error'] if 'error' in res else str(res['rss_peak_mb']) + ' MB peak'}",
            file=sys.stderr,
        )
        results.append(
            {
                "section": section,
                "label": label,
                **{k: spec[k] for k in ("format", "kind", "method", "samples", "data", "strided")},
                **res,
            }
        )
    return results


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="ONNX only")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    from fwx.ui import table

    acc = [c for c in ACCURACY if not args.quick or c[1] == "onnx"]
    mem = [c for c in MEMORY if not args.quick or c[1] == "onnx"]
    with tempfile.TemporaryDirectory(prefix="fwx-bench-quant-") as tmp:
        work = Path(tmp)
        digits = prepare_digits(work, with_tflite=not args.quick)
        print(
            f"digits CNN: {digits['params']} params, trained on {digits['train_samples']} samples in "
            f"{digits['train_seconds']}s; held-out top-1 {digits['float_accuracy'] * 100:.2f}%",
            file=sys.stderr,
        )
        results = _measure("accuracy", acc, digits, work)
        results += _measure("memory", mem, prepare_wide(work, with_tflite=not args.quick), work)
    print(
        table(
            (
                "configuration",
                "samples",
                "float top-1",
                "int top-1",
                "drop pt",
                "cos min",
                "size",
                "calib s",
                "peak MB",
            ),
            [accuracy_row(r["label"], r) for r in results if r["section"] == "accuracy"],
            title=f"digits CNN ({digits['params']} params), top-1 on the {digits['eval_samples']}-sample "
            "held-out split",
        )
    )
    print()
    print(
        table(
            ("configuration", "samples", "calib s", "baseline MB", "peak MB", "growth MB"),
            [memory_row(r["label"], r) for r in results if r["section"] == "memory"],
            title="calibration memory, wide CNN (3x32x32 in, 3 convs x 32 ch); one subprocess per row",
        )
    )
    for r in results:
        if "error" in r:
            print(f"error: {r['label']} ({r['samples']} samples): {r['error']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _provenance import provenance

    from fwx.quantize.cpu import features

    meta = {
        "provenance": provenance(),
        "cpu": features().to_json(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        **{k: v for k, v in digits.items() if k not in ("onnx", "savedmodel", "calib", "eval")},
    }
    args.out.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
