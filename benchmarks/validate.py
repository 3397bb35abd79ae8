"""Benchmark: time to validate the sample CNN across every format.

Two groups, each built with the frameworks' own APIs (no fwx exporter needed):
the PyTorch ``SmallCNN`` as ONNX, TorchScript and .pt2 against the eager
module, and the Keras CNN as SavedModel and TFLite against the Keras model.
When ``fwx.exporter.export`` works here, a third row validates an exported
version folder end to end (``fwx.validators.pipeline.validate``, checksums included).

Prints a table and writes bench-results/validate.json.
    python benchmarks/validate.py [--samples 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._provenance import provenance, spread  # noqa: E402
from fwx import ui  # noqa: E402
from fwx.formats import Format  # noqa: E402
from fwx.signature import Signature, TensorSpec  # noqa: E402

TORCH_SIG = Signature(
    (TensorSpec("image", "float32", ("N", 3, 32, 32)),), (TensorSpec("logits", "float32", ("N", 10)),)
)
KERAS_SIG = Signature(
    (TensorSpec("image", "float32", ("N", 32, 32, 3)),), (TensorSpec("logits", "float32", ("N", 10)),)
)


def build_torch(d: Path) -> tuple[Any, dict[str, tuple[Format, Path]]]:
    import torch

    from samples.models import build_torch_cnn

    m, x = build_torch_cnn(), torch.randn(2, 3, 32, 32)
    torch.onnx.export(
        m,
        (x,),
        str(d / "model.onnx"),
        input_names=["image"],
        output_names=["logits"],
        dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}},
        dynamo=False,
        opset_version=17,
    )
    torch.jit.trace(m, (x,)).save(str(d / "model.torchscript.pt"))
    ep = torch.export.export(m, (x,), dynamic_shapes=({0: torch.export.Dim("N", min=1, max=1024)},))
    torch.export.save(ep, str(d / "model.pt2"))
    return m, {
        "onnx": (Format.ONNX, d / "model.onnx"),
        "torchscript": (Format.TORCHSCRIPT, d / "model.torchscript.pt"),
        "pt2": (Format.PT2, d / "model.pt2"),
    }


def build_keras(d: Path) -> tuple[Any, dict[str, tuple[Format, Path]]]:
    import keras
    import tensorflow as tf

    from samples.models import build_keras_model

    model = build_keras_model()
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        "serving_default",
        lambda image: {"logits": model(image, training=False)},
        input_signature=[tf.TensorSpec([None, 32, 32, 3], tf.float32, name="image")],
    )
    archive.write_out(str(d / "model.savedmodel"), verbose=False)
    (d / "model.tflite").write_bytes(tf.lite.TFLiteConverter.from_saved_model(str(d / "model.savedmodel")).convert())
    return model, {
        "savedmodel": (Format.SAVEDMODEL, d / "model.savedmodel"),
        "tflite": (Format.TFLITE, d / "model.tflite"),
    }


def run_group(
    name: str, ref: Any, files: dict[str, tuple[Format, Path]], sig: Signature, samples: int, repeats: int
) -> list[dict[str, Any]]:
    from fwx.runtimes import load_runtime
    from fwx.validators import InputConfig, validate_runtimes

    t0 = time.perf_counter()
    cands = {k: load_runtime(f, p, signature_hint=sig) for k, (f, p) in files.items()}
    load_s = time.perf_counter() - t0
    times, report = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        report = validate_runtimes(ref, cands, signature=sig, input_config=InputConfig(samples=samples))
        times.append(time.perf_counter() - t0)
    assert report is not None
    rows = []
    for a in report.artifacts:
        rows.append(
            {
                "group": name,
                "artifact": a.key,
                "passed": a.passed,
                "load_s_group": round(load_s, 3),
                "validate_s_median": round(statistics.median(times), 3),
                "validate_s": spread(times),
                "mean_infer_ms": a.mean_ms,
                "max_abs": max((o.metrics["max_abs"] for o in a.outputs), default=None),
            }
        )
    return rows


def run_exporter(d: Path, repeats: int) -> dict[str, Any]:
    """End to end: export the Keras sample with fwx, then validate the version folder (if the exporter works)."""
    try:
        from fwx.exporter import ExportOptions, export
        from fwx.validators.pipeline import ValidateOptions, validate

        src = d / "cnn_keras.keras"
        from samples.models import build_keras_model

        build_keras_model().save(src)
        ui.state.quiet = True
        res = export(str(src), ["all"], ExportOptions(out=d / "repo", name="cnn", keep_failed=True))
        folder = Path(getattr(res, "path", d / "repo" / "cnn" / "1"))
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            report = validate([folder], ValidateOptions(device="cpu"))
            times.append(time.perf_counter() - t0)
        return {
            "validate_s": spread(times),
            "passed": report.passed,
            "artifacts": [a.key for a in report.artifacts],
            "reference": report.reference.get("key"),
        }
    except Exception as exc:
        return {"skipped": f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"}
    finally:
        ui.state.quiet = False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "validate.json"))
    args = ap.parse_args()
    from fwx.runtimes.eager_keras import KerasRuntime
    from fwx.runtimes.eager_torch import EagerTorchRuntime

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        tm, tfiles = build_torch(d)
        km, kfiles = build_keras(d)
        rows = run_group(
            "torch SmallCNN",
            EagerTorchRuntime.from_module(tm, TORCH_SIG),
            tfiles,
            TORCH_SIG,
            args.samples,
            args.repeats,
        )
        rows += run_group(
            "keras CNN", KerasRuntime.from_model(km, KERAS_SIG), kfiles, KERAS_SIG, args.samples, args.repeats
        )
        e2e = run_exporter(d, args.repeats)
    print(
        ui.table(
            ["group", "artifact", "pass", "load s (group)", "validate s, median (min-max)", "infer ms", "max abs"],
            [
                [
                    r["group"],
                    r["artifact"],
                    r["passed"],
                    r["load_s_group"],
                    f"{r['validate_s']['median']} ({r['validate_s']['min']}-{r['validate_s']['max']})",
                    f"{r['mean_infer_ms']:.2f}",
                    f"{r['max_abs']:.1e}",
                ]
                for r in rows
            ],
            title=f"validate: {args.samples} samples (batch 1 and 3), median of {args.repeats}",
        )
    )
    print(f"end-to-end (fwx export + validate of the version folder): {e2e}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "rows": rows,
                "end_to_end": e2e,
                "samples": args.samples,
                "repeats": args.repeats,
                "provenance": provenance(),
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
