"""Tiny PyTorch models with one quirk each, used as factory sources (``path/to/toy_models.py:build_x``).

This file is imported by fwx from its path, so it has no relative imports.
"""

from __future__ import annotations

import torch


class Unscriptable(torch.nn.Module):
    """``torch.jit.script`` rejects the generator expression; ``torch.jit.trace`` handles it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) + sum(x.mean() for _ in range(2))


class CumSum(torch.nn.Module):
    """Needs ONNX opset >= 11 (CumSum)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.cumsum(x, dim=1))


class BakedBatch(torch.nn.Module):
    """Tracing turns ``int(x.shape[0])`` into a constant: the traced module only runs at that batch size."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(int(x.shape[0]), -1).sum(1, keepdim=True)


def build_unscriptable() -> torch.nn.Module:
    torch.manual_seed(0)
    return Unscriptable().eval()


def build_cumsum() -> torch.nn.Module:
    torch.manual_seed(0)
    return CumSum().eval()


def build_baked_batch() -> torch.nn.Module:
    return BakedBatch().eval()


class TinyEncoder(torch.nn.Module):
    """Eval mode under ``no_grad`` takes the fused MHA fast path (``aten::_transformer_encoder_layer_fwd``)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(20, 16)
        layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.enc(self.emb(ids))


def build_tiny_encoder() -> torch.nn.Module:
    torch.manual_seed(0)
    return TinyEncoder().eval()


class SignBranch(torch.nn.Module):
    """A Python branch on the data: scripting keeps it, every tracing exporter bakes the sample's branch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool(x.sum() > 0):
            return x * 2.0
        return x * -3.0


def build_sign_branch() -> torch.nn.Module:
    return SignBranch().eval()
