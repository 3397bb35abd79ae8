"""Measure fwx's ONNX -> TorchScript / .pt2 translator on the test models; prints the table in docs/onnx_torch.md.

Run: .venv/bin/python tests/converters/onnx_torch/measure.py [--json out.json]
Each row: conversion wall and CPU seconds (including the built-in verification), and the max abs error of
the artifact, loaded from disk, against onnxruntime at two batch sizes (x two lengths for sequence models).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from onnx_torch_models import (  # noqa: E402
    MLP,
    DepthwiseCNN,
    LSTMNet,
    ResCNN,
    Transformer,
    TwoInTwoOut,
    export,
    keras_cnn_onnx,
)
from test_models import check_sizes, convert  # noqa: E402

from fwx.formats import Format  # noqa: E402

RNG = np.random.default_rng(0)
Feeds = Callable[[int, int], dict[str, np.ndarray]]


def _img(b: int, _: int) -> dict[str, np.ndarray]:
    return {"x": RNG.standard_normal((b, 3, 16, 16)).astype(np.float32)}


def _ids(b: int, s: int) -> dict[str, np.ndarray]:
    return {"ids": RNG.integers(0, 50, (b, s)).astype(np.int64)}


def _seq(b: int, t: int) -> dict[str, np.ndarray]:
    return {"x": RNG.standard_normal((b, t, 8)).astype(np.float32)}


def _gelu_transformer() -> Transformer:
    m = Transformer()
    for layer in m.enc.layers:
        layer.activation = torch.nn.functional.gelu
    return m


def cases() -> list[tuple[str, Callable[[Path], Path], Feeds, list[tuple[int, int]], dict[str, np.ndarray] | None]]:
    img, tr, seq = [{0: "batch"}], [{0: "batch", 1: "seq"}], [{0: "batch", 1: "time"}]
    return [
        (
            "ResCNN, legacy opset 17",
            lambda p: export(
                ResCNN(), (torch.randn(2, 3, 16, 16),), p, dynamo=False, names=["x"], outputs=["y"], dims=img
            ),
            _img,
            [(1, 0), (5, 0)],
            None,
        ),
        (
            "ResCNN, dynamo opset 18",
            lambda p: export(
                ResCNN(), (torch.randn(2, 3, 16, 16),), p, dynamo=True, names=["x"], outputs=["y"], dims=img
            ),
            _img,
            [(1, 0), (5, 0)],
            None,
        ),
        (
            "Depthwise CNN, legacy 17",
            lambda p: export(
                DepthwiseCNN(), (torch.randn(2, 3, 16, 16),), p, dynamo=False, names=["x"], outputs=["y"], dims=img
            ),
            _img,
            [(1, 0), (5, 0)],
            None,
        ),
        (
            "MLP, dynamo opset 18",
            lambda p: export(MLP(), (torch.randn(3, 12),), p, dynamo=True, names=["x"], outputs=["y"], dims=img),
            lambda b, _: {"x": RNG.standard_normal((b, 12)).astype(np.float32)},
            [(1, 0), (8, 0)],
            None,
        ),
        (
            "2-in/2-out, legacy 17",
            lambda p: export(
                TwoInTwoOut(),
                (torch.randn(2, 6), torch.randn(2, 3)),
                p,
                dynamo=False,
                names=["x", "y"],
                outputs=["a", "b"],
                dims=[{0: "n"}, {0: "n"}],
            ),
            lambda b, _: {
                "x": RNG.standard_normal((b, 6)).astype(np.float32),
                "y": RNG.standard_normal((b, 3)).astype(np.float32),
            },
            [(1, 0), (7, 0)],
            None,
        ),
        (
            "Transformer, legacy 17 (seq fixed at 16)",
            lambda p: export(
                Transformer(), (torch.randint(0, 50, (3, 16)),), p, dynamo=False, names=["ids"], outputs=["y"], dims=tr
            ),
            _ids,
            [(1, 16), (6, 16)],
            _ids(3, 16),
        ),
        (
            "Transformer, dynamo opset 18",
            lambda p: export(
                Transformer(), (torch.randint(0, 50, (3, 16)),), p, dynamo=True, names=["ids"], outputs=["y"], dims=tr
            ),
            _ids,
            [(1, 7), (1, 16), (5, 7), (5, 16)],
            None,
        ),
        (
            "Transformer+GELU, dynamo opset 20",
            lambda p: export(
                _gelu_transformer(),
                (torch.randint(0, 50, (3, 16)),),
                p,
                dynamo=True,
                names=["ids"],
                outputs=["y"],
                dims=tr,
                opset=20,
            ),
            _ids,
            [(1, 7), (1, 16), (5, 7), (5, 16)],
            None,
        ),
        (
            "LSTM 2-layer, legacy 17",
            lambda p: export(
                LSTMNet(), (torch.randn(3, 10, 8),), p, dynamo=False, names=["x"], outputs=["y"], dims=seq
            ),
            _seq,
            [(1, 5), (1, 12), (4, 5), (4, 12)],
            None,
        ),
        (
            "BiLSTM 2-layer, legacy 17",
            lambda p: export(
                LSTMNet(True), (torch.randn(3, 10, 8),), p, dynamo=False, names=["x"], outputs=["y"], dims=seq
            ),
            _seq,
            [(1, 5), (1, 12), (4, 5), (4, 12)],
            None,
        ),
        (
            "Keras CNN (NHWC) via tf2onnx 17",
            keras_cnn_onnx,
            lambda b, _: {"image": RNG.standard_normal((b, 16, 16, 3)).astype(np.float32)},
            [(1, 0), (4, 0)],
            None,
        ),
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, make, feeds, sizes, sample) in enumerate(cases()):
            path = make(Path(tmp) / f"m{i}.onnx")
            for target in (Format.TORCHSCRIPT, Format.PT2):
                wall, cpu = time.perf_counter(), time.process_time()
                result = convert(path, target, sample)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                errs = {
                    f"{b}x{s}" if s else f"b{b}": check_sizes(result, target, path, [feeds(b, s)]) for b, s in sizes
                }
                rows.append(
                    {
                        "model": name,
                        "target": str(target),
                        "wall_s": round(wall, 2),
                        "cpu_s": round(cpu, 2),
                        "max_abs_err": errs,
                        "signature": str(result.signature.inputs[0]),
                    }
                )
                print(
                    f"| {name} | {target} | {wall:.2f} | {cpu:.2f} | "
                    + ", ".join(f"{k}: {v:.1e}" for k, v in errs.items())
                    + f" | `{result.signature.inputs[0]}` |",
                    flush=True,
                )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
