"""Tiny ``torch.export`` programs saved the way their users save them (``.pt2`` with ``Dim``s)."""

from __future__ import annotations

from pathlib import Path

import torch


class MaskedEncoder(torch.nn.Module):
    """Token ids + attention mask sharing batch and sequence (the BERT-class input pair), mean-pooled."""

    def __init__(self, vocab: int = 50, width: int = 8, max_len: int = 64) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, width)
        self.pos = torch.nn.Parameter(torch.randn(max_len, width) * 0.1)
        self.lin = torch.nn.Linear(width, 4)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = self.emb(input_ids) + self.pos[: input_ids.shape[1]]  # a length-dependent slice, as real encoders do
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        return self.lin((h * m).sum(1) / m.sum(1).clamp(min=1.0))


class TwoHeads(torch.nn.Module):
    """Two inputs whose batch sizes are independent."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a.sum(1), b.sum(1)


def save_encoder(path: Path) -> Path:
    torch.manual_seed(0)
    batch, seq = torch.export.Dim("batch", max=64), torch.export.Dim("seq", min=2, max=64)
    ids, mask = torch.randint(0, 50, (2, 7)), torch.ones(2, 7, dtype=torch.int64)
    ep = torch.export.export(
        MaskedEncoder().eval(), (ids, mask), dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq})
    )
    torch.export.save(ep, path)
    return path


def save_two_heads(path: Path) -> Path:
    na, nb = torch.export.Dim("na"), torch.export.Dim("nb")
    ep = torch.export.export(
        TwoHeads().eval(), (torch.randn(2, 3), torch.randn(4, 5)), dynamic_shapes=({0: na}, {0: nb})
    )
    torch.export.save(ep, path)
    return path


class BatchView(torch.nn.Module):
    """Reshapes by its input's batch size: a trace records that size as a constant, so the legacy ONNX
    exporter's file declares the batch fixed (the BERT-from-``.pt2`` case in small)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(2, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x.view(x.shape[0], 3, 2).sum(1))


def save_batch_view(path: Path) -> Path:
    torch.manual_seed(0)
    ep = torch.export.export(BatchView().eval(), (torch.randn(2, 6),), dynamic_shapes=({0: torch.export.Dim("n")},))
    torch.export.save(ep, path)
    return path
