"""A factory ``fwx export`` can import: torch Linear(1,1) with w=2, b=1 (4 -> 9)."""

from __future__ import annotations

from typing import Any


def build() -> Any:
    import torch

    model = torch.nn.Linear(1, 1)
    with torch.no_grad():
        model.weight.fill_(2.0)
        model.bias.fill_(1.0)
    return model.eval()
