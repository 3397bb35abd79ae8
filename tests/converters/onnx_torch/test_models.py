"""Whole models through both edges: torch -> ONNX (legacy opset 17 and dynamo opset 18+) -> TorchScript / .pt2,
then the artifact, loaded from disk, against onnxruntime at two batch sizes (and two sequence lengths)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from onnx_torch_helpers import assert_same
from onnx_torch_models import (
    MLP,
    DepthwiseCNN,
    ResCNN,
    TwoInTwoOut,
    export,
    ort_run,
)

from fwx.converters.base import ConvertOptions, ConvertResult, SourceModel
from fwx.converters.onnx2pt2 import OnnxToExportedProgram
from fwx.converters.onnx2torchscript import OnnxToTorchScript
from fwx.formats import Format
from fwx.signature import Signature

RNG = np.random.default_rng(0)


def convert(onnx_path: Path, target: Format, sample: dict[str, np.ndarray] | None = None, **kw: Any) -> ConvertResult:
    cls = OnnxToTorchScript if target is Format.TORCHSCRIPT else OnnxToExportedProgram
    out = onnx_path.with_suffix(".ts.pt" if target is Format.TORCHSCRIPT else ".pt2")
    src = SourceModel(Format.ONNX, onnx_path, Signature(()), sample_inputs=sample or {})
    opts = ConvertOptions(**kw)
    conv = cls()
    conv.precheck(src, opts)
    return conv.convert(src, out, opts)


def load(result: ConvertResult, target: Format) -> Callable[..., Any]:
    if target is Format.TORCHSCRIPT:
        return torch.jit.load(str(result.path))  # type: ignore[no-any-return]
    return torch.export.load(str(result.path)).module()  # type: ignore[no-any-return]


def check_sizes(
    result: ConvertResult, target: Format, onnx_path: Path, feeds_list: list[dict[str, np.ndarray]]
) -> float:
    """The artifact as loaded from disk matches onnxruntime on every feed; returns the worst error."""
    module, worst = load(result, target), 0.0
    for feeds in feeds_list:
        with torch.no_grad():
            out = module(*(torch.from_numpy(v) for v in feeds.values()))
        outs = [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]
        worst = max(worst, assert_same(outs, ort_run(onnx_path, feeds), f"{onnx_path.name} {target}"))
    return worst


def images(b: int, hw: int = 16) -> dict[str, np.ndarray]:
    return {"x": RNG.standard_normal((b, 3, hw, hw)).astype(np.float32)}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx_torch_models")


@pytest.mark.parametrize("dynamo", [False, True], ids=["ts17", "dynamo18"])
def test_rescnn(workdir: Path, dynamo: bool) -> None:
    path = export(
        ResCNN(),
        (torch.randn(2, 3, 16, 16),),
        workdir / f"rescnn_{dynamo}.onnx",
        dynamo=dynamo,
        names=["x"],
        outputs=["logits"],
        dims=[{0: "batch"}],
    )
    targets = [Format.TORCHSCRIPT] if dynamo else [Format.TORCHSCRIPT, Format.PT2]
    for target in targets:
        result = convert(path, target)
        assert result.signature.inputs[0].shape == ("batch", 3, 16, 16)
        assert check_sizes(result, target, path, [images(2), images(5), images(1)]) < 1e-4


def test_depthwise_cnn(workdir: Path) -> None:
    path = export(
        DepthwiseCNN(),
        (torch.randn(2, 3, 16, 16),),
        workdir / "dwcnn.onnx",
        dynamo=False,
        names=["x"],
        outputs=["y"],
        dims=[{0: "batch", 2: "h", 3: "w"}],
    )
    result = convert(path, Format.TORCHSCRIPT)
    check_sizes(result, Format.TORCHSCRIPT, path, [images(2), images(3, 20), images(1, 9)])


@pytest.mark.parametrize("dynamo", [False, True], ids=["ts17", "dynamo18"])
def test_mlp(workdir: Path, dynamo: bool) -> None:
    path = export(
        MLP(),
        (torch.randn(3, 12),),
        workdir / f"mlp_{dynamo}.onnx",
        dynamo=dynamo,
        names=["x"],
        outputs=["probs"],
        dims=[{0: "batch"}],
    )
    result = convert(path, Format.TORCHSCRIPT)
    feeds = [{"x": RNG.standard_normal((b, 12)).astype(np.float32)} for b in (3, 1, 8)]
    check_sizes(result, Format.TORCHSCRIPT, path, feeds)


def test_two_inputs_two_outputs_keep_onnx_order(workdir: Path) -> None:
    path = export(
        TwoInTwoOut(),
        (torch.randn(2, 6), torch.randn(2, 3)),
        workdir / "twoio.onnx",
        dynamo=False,
        names=["x", "y"],
        outputs=["total", "clipped"],
        dims=[{0: "n"}, {0: "n"}],
    )
    for target in (Format.TORCHSCRIPT, Format.PT2):
        result = convert(path, target)
        assert result.signature.input_names == ["x", "y"]
        assert result.signature.output_names == ["total", "clipped"]
        feeds = [
            {"x": RNG.standard_normal((b, 6)).astype(np.float32), "y": RNG.standard_normal((b, 3)).astype(np.float32)}
            for b in (2, 7)
        ]
        check_sizes(result, target, path, feeds)
