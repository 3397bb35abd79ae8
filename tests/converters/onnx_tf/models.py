"""Tiny PyTorch models exported to ONNX by both torch exporters, for the end-to-end translator tests.

Each model is built with a fixed seed in eval mode (BatchNorm statistics are
randomised so folding them is actually tested) and exported with dynamic batch
(and sequence/time) axes, by the legacy TorchScript exporter at opset 17 and by
the dynamo exporter (opset 18+).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

EXPORTERS = ("legacy17", "dynamo")


@dataclass(frozen=True)
class Spec:
    name: str
    inputs: tuple[tuple[str, tuple[int, ...], str], ...]  # name, example shape, dtype
    outputs: tuple[str, ...]
    dynamic: dict[str, dict[int, str]]
    seq_axis: int | None = None  # the second dynamic axis, if any


SPECS = {
    "rescnn": Spec("rescnn", (("image", (2, 3, 16, 16), "float32"),), ("logits",), {"image": {0: "N"}}),
    "dwsep": Spec("dwsep", (("image", (2, 4, 16, 16), "float32"),), ("logits",), {"image": {0: "N"}}),
    "mlp": Spec("mlp", (("x", (2, 12), "float32"),), ("probs",), {"x": {0: "N"}}),
    "two_io": Spec(
        "two_io",
        (("x", (2, 6), "float32"), ("z", (2, 3), "float32")),
        ("score", "features"),
        {"x": {0: "N"}, "z": {0: "N"}},
    ),
    "transformer": Spec(
        "transformer", (("input_ids", (2, 9), "int64"),), ("logits",), {"input_ids": {0: "N", 1: "S"}}, seq_axis=1
    ),
    "lstm": Spec("lstm", (("x", (2, 7, 6), "float32"),), ("y",), {"x": {0: "N", 1: "T"}}, seq_axis=1),
    "bilstm": Spec("bilstm", (("x", (2, 7, 6), "float32"),), ("y",), {"x": {0: "N", 1: "T"}}, seq_axis=1),
}


def build(name: str) -> Any:
    import torch
    from torch import nn

    class ResCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
            self.c2, self.b2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
            self.c3 = nn.Conv2d(8, 16, 3, stride=2, padding=2, dilation=2)
            self.pool, self.avg = nn.MaxPool2d(2), nn.AvgPool2d(3, stride=1, padding=1)
            self.fc = nn.Linear(16, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(self.b1(self.c1(x)))
            y = torch.relu(y + self.b2(self.c2(y)))
            y = self.avg(self.pool(torch.relu(self.c3(y))))
            return self.fc(nn.functional.adaptive_avg_pool2d(y, 1).flatten(1))

    class DwSep(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dw, self.pw, self.bn = nn.Conv2d(4, 4, 3, padding=1, groups=4), nn.Conv2d(4, 8, 1), nn.BatchNorm2d(8)
            self.g, self.fc = nn.Conv2d(8, 8, 3, stride=2, groups=2), nn.Linear(8, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = nn.functional.relu6(self.bn(self.pw(self.dw(x))))
            return self.fc(self.g(y).mean((2, 3)))

    class TwoIO(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(6, 4), nn.Linear(3, 4)

        def forward(self, x: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            h = self.a(x) * torch.sigmoid(self.b(z))
            return h.sum(-1, keepdim=True), torch.cat([h, x[:, :2]], 1)

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(50, 32)
            layer = nn.TransformerEncoderLayer(32, 2, 64, dropout=0.1, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(32, 7)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.head(self.enc(self.emb(ids)))

    class Recurrent(nn.Module):
        def __init__(self, bidirectional: bool) -> None:
            super().__init__()
            self.rnn = nn.LSTM(6, 16, 2, batch_first=True, bidirectional=bidirectional)
            self.fc = nn.Linear(32 if bidirectional else 16, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.rnn(x)[0])

    torch.manual_seed(0)
    factories = {
        "rescnn": ResCNN,
        "dwsep": DwSep,
        "two_io": TwoIO,
        "transformer": Encoder,
        "mlp": lambda: nn.Sequential(
            nn.Linear(12, 32), nn.GELU(), nn.Linear(32, 16), nn.Tanh(), nn.Linear(16, 3), nn.Softmax(-1)
        ),
        "lstm": lambda: Recurrent(False),
        "bilstm": lambda: Recurrent(True),
    }
    model = factories[name]()
    for mod in model.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)
            mod.weight.data.uniform_(0.5, 1.5)
            mod.bias.data.uniform_(-0.2, 0.2)
    return model.eval()


def example(spec: Spec) -> tuple[Any, ...]:
    import torch

    gen = torch.Generator().manual_seed(1)
    return tuple(
        torch.randint(0, 50, shape, generator=gen) if dtype == "int64" else torch.randn(shape, generator=gen)
        for _, shape, dtype in spec.inputs
    )


def export(name: str, exporter: str, folder: Path) -> Path:
    """Write ``<folder>/<name>_<exporter>.onnx`` and return its path."""
    import warnings

    import torch

    spec, model = SPECS[name], build(name)
    path = folder / f"{name}_{exporter}.onnx"
    names = [n for n, _, _ in spec.inputs]
    with warnings.catch_warnings():  # not no_grad(): that switches MHA to a fused op no exporter knows
        warnings.simplefilter("ignore")
        if exporter == "legacy17":
            torch.onnx.export(
                model,
                example(spec),
                str(path),
                input_names=names,
                output_names=list(spec.outputs),
                dynamic_axes=spec.dynamic,
                opset_version=17,
                dynamo=False,
            )
        else:
            auto = torch.export.Dim.AUTO
            shapes = tuple(dict.fromkeys(spec.dynamic[n], auto) for n in names)
            torch.onnx.export(
                model,
                example(spec),
                str(path),
                input_names=names,
                output_names=list(spec.outputs),
                dynamic_shapes=shapes,
                dynamo=True,
                verbose=False,
            )
    return path


def feeds(spec: Spec, batch: int, seq: int | None, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for n, shape, dtype in spec.inputs:
        dims = list(shape)
        dims[0] = batch
        if seq is not None and spec.seq_axis is not None:
            dims[spec.seq_axis] = seq
        out[n] = (
            rng.integers(0, 50, dims).astype(np.int64)
            if dtype == "int64"
            else rng.standard_normal(dims).astype(np.float32)
        )
    return out


def sizes(spec: Spec, exporter: str) -> list[tuple[int, int | None]]:
    """(batch, sequence) pairs to check: two batch sizes, and two sequence lengths where the ONNX file allows.

    The legacy exporter bakes the sequence length into nn.MultiheadAttention's reshapes, so
    its Transformer only runs at the export length (onnxruntime fails on any other).
    """
    if spec.seq_axis is None:
        return [(1, None), (3, None)]
    export_len = spec.inputs[0][1][spec.seq_axis]
    if spec.name == "transformer" and exporter == "legacy17":
        return [(1, export_len), (3, export_len)]
    return [(1, 5), (3, 11)]
