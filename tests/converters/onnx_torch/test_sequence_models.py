"""The Transformer encoder and the LSTM, exported by both torch exporters, to TorchScript and .pt2,
checked at two batch sizes and two sequence lengths wherever the ONNX file itself accepts them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from onnx_torch_models import LSTMNet, Transformer, export
from test_models import check_sizes, convert

from fwx.formats import Format

RNG = np.random.default_rng(1)
BOTH = [Format.TORCHSCRIPT, Format.PT2]


def ids(b: int, s: int) -> dict[str, np.ndarray]:
    return {"ids": RNG.integers(0, 50, (b, s)).astype(np.int64)}


def seqs(b: int, t: int) -> dict[str, np.ndarray]:
    return {"x": RNG.standard_normal((b, t, 8)).astype(np.float32)}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx_torch_seq")


@pytest.mark.slow
@pytest.mark.parametrize("target", BOTH, ids=str)
def test_transformer_dynamo_opset18_keeps_batch_and_seq(workdir: Path, target: Format) -> None:
    path = workdir / "tr_dynamo.onnx"
    if not path.exists():
        export(
            Transformer(),
            (torch.randint(0, 50, (3, 16)),),
            path,
            dynamo=True,
            names=["ids"],
            outputs=["logits"],
            dims=[{0: "batch", 1: "seq"}],
        )
    result = convert(path, target)
    assert result.signature.inputs[0].shape == ("batch", "seq")
    assert check_sizes(result, target, path, [ids(b, s) for b in (2, 5) for s in (7, 16)]) < 1e-4


@pytest.mark.slow
def test_transformer_dynamo_opset20_gelu_to_torchscript(workdir: Path) -> None:
    """Opset 20 writes the Gelu op (and the same dynamic Reshape chains)."""
    model = Transformer()
    for layer in model.enc.layers:
        layer.activation = torch.nn.functional.gelu
    path = export(
        model,
        (torch.randint(0, 50, (3, 16)),),
        workdir / "tr_dynamo20.onnx",
        dynamo=True,
        names=["ids"],
        outputs=["logits"],
        dims=[{0: "batch", 1: "seq"}],
        opset=20,
    )
    result = convert(path, Format.TORCHSCRIPT)
    assert check_sizes(result, Format.TORCHSCRIPT, path, [ids(b, s) for b in (1, 4) for s in (5, 11)]) < 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("target", BOTH, ids=str)
def test_transformer_legacy_opset17(workdir: Path, target: Format) -> None:
    """The legacy exporter bakes seq=16 into the attention Reshape (onnxruntime rejects other lengths),
    so only the batch varies; the .pt2 says so by pinning seq to 16."""
    path = workdir / "tr_ts17.onnx"
    if not path.exists():
        export(
            Transformer(),
            (torch.randint(0, 50, (3, 16)),),
            path,
            dynamo=False,
            names=["ids"],
            outputs=["logits"],
            dims=[{0: "batch", 1: "seq"}],
        )
    result = convert(path, target, sample=ids(3, 16))
    assert check_sizes(result, target, path, [ids(b, 16) for b in (1, 2, 6)]) < 1e-4
    assert any("seq" in n and "fixed by the ONNX graph" in n for n in result.notes)
    if target is Format.PT2:
        assert result.signature.inputs[0].shape == ("batch", 16)


@pytest.mark.slow
@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
@pytest.mark.parametrize("target", BOTH, ids=str)
def test_lstm_legacy_opset17_dynamic_time(workdir: Path, target: Format, bidirectional: bool) -> None:
    path = workdir / f"lstm_{bidirectional}.onnx"
    if not path.exists():
        export(
            LSTMNet(bidirectional),
            (torch.randn(3, 10, 8),),
            path,
            dynamo=False,
            names=["x"],
            outputs=["y"],
            dims=[{0: "batch", 1: "time"}],
        )
    result = convert(path, target)
    assert result.signature.inputs[0].shape == ("batch", "time", 8)
    assert check_sizes(result, target, path, [seqs(b, t) for b in (1, 4) for t in (5, 12)]) < 1e-4


def test_lstm_dynamo_to_torchscript(workdir: Path) -> None:
    """The dynamo exporter fixes the LSTM's time axis itself; the batch axis must still be free."""
    path = export(
        LSTMNet(),
        (torch.randn(3, 10, 8),),
        workdir / "lstm_dynamo.onnx",
        dynamo=True,
        names=["x"],
        outputs=["y"],
        dims=[{0: "batch", 1: "time"}],
    )
    result = convert(path, Format.TORCHSCRIPT)
    check_sizes(result, Format.TORCHSCRIPT, path, [seqs(b, 10) for b in (2, 5)])
