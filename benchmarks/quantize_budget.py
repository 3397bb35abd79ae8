"""INT8 on four trained networks through ``fwx export``: what plain INT8 costs, what the budget keeps in float.

sklearn's 8x8 digits (1347 training / 450 held-out, stratified, seed 0)
upscaled to 32x32 (nearest neighbour, 0..1, grey repeated to 3 channels), and
four small versions of the networks issue 25 measured at full size, built with
their libraries' own constructors at a fraction of the width:

* MobileNetV3-small (torchvision ``MobileNetV3``, width 0.25)
* EfficientNet-B0 (torchvision ``EfficientNet``, width 0.25, depth 0.34)
* ResNet-18 (torchvision ``BasicBlock`` x [2, 2, 2, 2], widths 8-64)
* MobileNetV2 (Keras ``applications.MobileNetV2``, alpha 0.35)

Each is trained from a seed, then exported by the CLI in a subprocess
(``fwx export ... --to onnx,tflite --quantize int8 --calibration-data
--eval-data --max-drop 0``). fwx searches the budget on one seeded half of the
450 eval images and reports its cost on the other half, which the search never
saw: ``plain``/``final`` are plain INT8 and what the budget published on the
searched half, ``holdout`` the same two on the held-out half (the figures the
docs quote), with the layers kept in float and their size cost. Each figure is
the median of the runs (seeds) with min and max.

    .venv/bin/python benchmarks/quantize_budget.py              # 3 seeds, ~15-25 min on 2 cores
    .venv/bin/python benchmarks/quantize_budget.py --nets resnet18 --runs 1
    .venv/bin/python benchmarks/quantize_budget.py --nets efficientnet_b0 --seeds 1,2 --out extra.json

A seed's figures do not depend on the command that ran it, so seeds run
separately (``--seeds``) complete a run stopped early.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from _provenance import provenance, spread  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "quantize_budget.json"
SIZE = 32
EPOCHS = {"mobilenet_v3_small": 12, "efficientnet_b0": 12, "resnet18": 6, "keras_mobilenet_v2": 12}


def _torchvision() -> None:
    """Import torchvision's model code without its compiled ops (they do not load with this torch)."""
    import types

    sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))


def mobilenet_v3_small() -> Any:
    _torchvision()
    from torchvision.models.mobilenetv3 import MobileNetV3, _mobilenet_v3_conf

    setting, last = _mobilenet_v3_conf("mobilenet_v3_small", width_mult=0.25)
    return MobileNetV3(setting, last, num_classes=10)


def efficientnet_b0() -> Any:
    _torchvision()
    from torchvision.models.efficientnet import EfficientNet, _efficientnet_conf

    setting, last = _efficientnet_conf("efficientnet_b0", width_mult=0.25, depth_mult=0.34)
    return EfficientNet(setting, 0.2, num_classes=10, last_channel=last)


def resnet18() -> Any:
    _torchvision()
    from torch import nn
    from torchvision.models.resnet import BasicBlock

    def stage(cin: int, cout: int, stride: int) -> nn.Sequential:
        down = (
            None
            if stride == 1 and cin == cout
            else nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        )
        return nn.Sequential(BasicBlock(cin, cout, stride, down), BasicBlock(cout, cout))

    widths = (8, 16, 32, 64)
    return nn.Sequential(
        nn.Conv2d(3, widths[0], 7, 2, 3, bias=False),
        nn.BatchNorm2d(widths[0]),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
        *(stage(widths[max(i - 1, 0)], w, 1 if i == 0 else 2) for i, w in enumerate(widths)),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(widths[-1], 10),
    )


def digits32() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The digits split, [N,3,32,32] float32 in 0..1."""
    from tests.quantize.conftest import load_digits_sample

    x_tr, y_tr, x_te, y_te = load_digits_sample().load_split()

    def up(x: np.ndarray) -> np.ndarray:
        x = np.repeat(np.repeat(x, SIZE // 8, axis=2), SIZE // 8, axis=3) / 16.0
        return np.repeat(x, 3, axis=1).astype(np.float32)

    return up(x_tr), np.asarray(y_tr), up(x_te), np.asarray(y_te)


def train_torch(name: str, x: np.ndarray, y: np.ndarray, seed: int, folder: Path) -> tuple[Path, float]:
    import torch

    torch.manual_seed(seed)
    model = globals()[name]()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y).long()
    gen = torch.Generator().manual_seed(seed)
    for _ in range(EPOCHS[name]):
        model.train()
        for idx in torch.randperm(len(xt), generator=gen).split(64):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx]).backward()
            opt.step()
    _recalibrate_batchnorm(model, xt)
    path = folder / f"{name}.pt"
    torch.save(model.eval().state_dict(), path)
    return path, 0.0


def _recalibrate_batchnorm(model: Any, x: Any) -> None:
    """Exact BatchNorm statistics over the training set: MobileNetV3 uses momentum 0.01, which a few hundred
    steps leave near their initial values (the eval-mode model then guesses at chance)."""
    import torch

    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative average
    model.train()
    with torch.no_grad():
        for batch in x.split(256):
            model(batch)


def train_keras(x: np.ndarray, y: np.ndarray, seed: int, folder: Path) -> tuple[Path, float]:
    import keras

    keras.utils.set_random_seed(seed)
    inp = keras.Input((SIZE, SIZE, 3), name="image")
    net = keras.applications.MobileNetV2(input_shape=(SIZE, SIZE, 3), alpha=0.35, weights=None, classes=10)
    model = keras.Model(inp, net(inp))
    model.compile(keras.optimizers.Adam(3e-3), "sparse_categorical_crossentropy")
    model.fit(x.transpose(0, 2, 3, 1), y, batch_size=64, epochs=EPOCHS["keras_mobilenet_v2"], verbose=0)
    path = folder / "keras_mobilenet_v2.keras"
    model.save(path)
    return path, 0.0


def export(name: str, model: Path, folder: Path, calib: Path, evaluation: Path) -> dict[str, Any]:
    """``fwx export`` through the CLI; returns its --json document."""
    shape = f"[N,{SIZE},{SIZE},3]" if name.startswith("keras") else f"[N,3,{SIZE},{SIZE}]"
    cmd = [sys.executable, "-m", "fwx", "export", str(model), "--to", "onnx,tflite", "--quantize", "int8"]
    if not name.startswith("keras"):
        cmd += ["--model-class", f"quantize_budget:{name}", "--input", f"image:float32{shape}", "--output", "logits"]
    cmd += ["--calibration-data", str(calib), "--eval-data", str(evaluation), "--max-drop", "0"]
    cmd += ["--out", str(folder / "repo"), "--json", "--keep-failed"]  # a failed check still has its receipt
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'benchmarks'}{os.pathsep}{ROOT}"}
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False, timeout=1800)
    seconds = time.perf_counter() - t0
    try:
        doc: dict[str, Any] = json.loads(res.stdout)
    except json.JSONDecodeError:
        doc = {"ok": False, "failures": [res.stderr.strip().splitlines()[-1:] or ["no output"]]}
    doc["seconds"] = seconds
    return doc


def figures(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per format: float top-1, plain and budgeted drop, layers in float, size cost; or why it failed."""
    out: dict[str, dict[str, Any]] = {}
    arts = (doc.get("manifest") or {}).get("artifacts", {})
    for fmt in ("onnx", "tflite"):
        art = arts.get(fmt) or (doc.get("manifest") or {}).get("failed", {}).get(fmt) or {}
        q = art.get("quantization")
        if not q or not q.get("budget"):
            out[fmt] = {"failed": str((doc.get("failed") or {}).get(fmt) or doc.get("failures"))[:300]}
            continue
        b = q["budget"]
        held = b.get("holdout") or {}
        out[fmt] = {
            "validated": bool((art.get("validation") or {}).get("passed")),
            "float_top1": round(100 * q["eval"]["accuracy_float"], 2),
            "plain_drop": held.get("plain", b["plain"])["drop_points"],
            "budget_drop": held.get("final", b["final"])["drop_points"],
            "searched_plain_drop": b["plain"]["drop_points"],
            "searched_budget_drop": b["final"]["drop_points"],
            "split": b.get("split"),
            "graph": b.get("graph"),
            "layers_in_float": len(b["float_layers"]),
            "float_layers": [f"{x['op']} {x['name']}" for x in b["float_layers"]],
            "size_float": q["size_before"],
            "size_int8": b["size_int8"],
            "size_cost_pct": round(100 * (b["size_final"] - b["size_int8"]) / b["size_int8"], 2),
        }
    return out


def one_run(name: str, seed: int, data: tuple[np.ndarray, ...]) -> dict[str, Any]:
    x_tr, y_tr, x_te, y_te = data
    keras_layout = name.startswith("keras")
    with tempfile.TemporaryDirectory(prefix="bench-qbudget-") as tmp:
        folder = Path(tmp)
        t0 = time.perf_counter()
        if keras_layout:
            model, _ = train_keras(x_tr, y_tr, seed, folder)
        else:
            model, _ = train_torch(name, x_tr, y_tr, seed, folder)
        train_s = time.perf_counter() - t0
        lay = (lambda a: a.transpose(0, 2, 3, 1)) if keras_layout else (lambda a: a)
        np.savez(folder / "calib.npz", image=lay(x_tr[:200]))
        np.savez(folder / "eval.npz", image=lay(x_te), labels=y_te)
        doc = export(name, model, folder, folder / "calib.npz", folder / "eval.npz")
    return {"seed": seed, "train_s": round(train_s, 1), "export_s": round(doc["seconds"], 1), **figures(doc)}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fmt in ("onnx", "tflite"):
        ok = [r[fmt] for r in runs if "failed" not in r[fmt]]
        refused = [r[fmt]["failed"] for r in runs if "failed" in r[fmt]]
        if not ok:
            out[fmt] = {"failed": refused}
            continue
        keys = ("float_top1", "plain_drop", "budget_drop", "layers_in_float", "size_cost_pct", "size_int8")
        out[fmt] = {k: spread([float(r[k]) for r in ok], 2) for k in keys} | {"runs_ok": len(ok), "refused": refused}
    out["export_s"] = spread([r["export_s"] for r in runs], 1)
    return out


def table(results: dict[str, Any]) -> str:
    head = f"{'network':20} {'fmt':7} {'float top-1':>14} {'plain INT8 pt':>18} {'budget pt':>16} {'in float':>14} {'size +%':>16}"
    lines = [head, "-" * len(head)]

    def cell(s: dict[str, float]) -> str:
        return f"{s['median']:.2f} [{s['min']:.2f},{s['max']:.2f}]"

    for name, res in results.items():
        for fmt in ("onnx", "tflite"):
            s = res["summary"][fmt]
            if "failed" in s:
                lines.append(f"{name:20} {fmt:7} failed: {s['failed'][0][:80]}")
                continue
            lines.append(
                f"{name:20} {fmt:7} {s['float_top1']['median']:13.2f}% {cell(s['plain_drop']):>18} "
                f"{cell(s['budget_drop']):>16} {s['layers_in_float']['median']:>14.0f} {cell(s['size_cost_pct']):>16}"
            )
    return "\n".join(lines)


def _cpu() -> dict[str, Any]:
    """The CPU as fwx.json records it for an INT8 artifact (model, the INT8-relevant flags, kernel class)."""
    from fwx.quantize.cpu import features

    return features().to_json()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seeds", help="comma-separated training seeds (default: 0 .. runs-1), e.g. to add one")
    ap.add_argument("--nets", default=",".join(EPOCHS))
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    data = digits32()
    results: dict[str, Any] = {}
    for name in args.nets.split(","):
        runs: list[dict[str, Any]] = []
        for seed in [int(x) for x in args.seeds.split(",")] if args.seeds else range(args.runs):
            runs.append(one_run(name, seed, data))
            print(f"{name} seed {seed}: {json.dumps(runs[-1])[:300]}", file=sys.stderr, flush=True)
            results[name] = {"summary": summary(runs), "runs": runs}
            _write(args.out, results)  # after every run: a long benchmark stopped early keeps what it measured
    print("digits 32x32; INT8 top-1 drop in points vs the float artifact on the 225 eval images the budget search")
    print("never saw (it searched the other 225 of 450); budget --max-drop 0")
    print(table(results))
    _write(args.out, results)
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")


def _write(out: Path, results: dict[str, Any]) -> None:
    doc = {"provenance": provenance(), "cpu": _cpu(), "what": __doc__.splitlines()[0], "networks": results}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
