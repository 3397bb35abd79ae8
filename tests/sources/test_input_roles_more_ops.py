"""Input roles through the other ways a model uses ids and masks: ``one_hot``, ``index_select``, ``take``,
``nn.EmbeddingBag``, and masks cast to float and multiplied, in place or in an ``einsum``.

Before, ``one_hot(x, 50) @ W`` gave ``x`` no range (drawn from [0, 10)) and a mask cast with
``.to(h.dtype)`` and contracted by ``einsum`` was noted "saw no use of it". Each model is followed
eagerly, as TorchScript and as the ONNX the TorchScript-based exporter writes.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from fwx.formats import Format
from fwx.signature import Signature, TensorSpec
from fwx.sources.input_roles import input_roles
from fwx.sources.load import LoadedSource
from fwx.sources.samples import InputConfig, generate_inputs

torch = pytest.importorskip("torch")
F = torch.nn.functional
SIG = Signature(
    (TensorSpec("ids", "int64", ("N", "S")), TensorSpec("keep", "int64", ("N", "S"))),
    (TensorSpec("h", "float32", ("N", 4)),),
)


class OneHot(torch.nn.Module):  # type: ignore[misc]
    """``one_hot(ids, 50) @ W``; the mask cast to float and multiplied."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(50, 4))

    def forward(self, ids: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        m = keep.to(torch.float32).unsqueeze(-1)
        return (F.one_hot(ids, 50).to(torch.float32) @ self.w * m).sum(1)


class IndexSelect(torch.nn.Module):  # type: ignore[misc]
    """``index_select`` of 30 rows; the mask cast to the table's dtype and contracted by ``einsum``."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(30, 4))

    def forward(self, ids: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        h = torch.index_select(self.w, 0, ids.reshape(-1)).reshape(ids.shape[0], ids.shape[1], 4)
        return torch.einsum("bsd,bs->bd", h, keep.to(h.dtype))


class Take(torch.nn.Module):  # type: ignore[misc]
    """``take`` from a 6 x 4 table (24 values); the mask multiplied in place."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(6, 4))

    def forward(self, ids: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        h = torch.take(self.w, ids)
        h.mul_(keep.to(h.dtype))
        return h[:, :1].expand(-1, 4)


class Bag(torch.nn.Module):  # type: ignore[misc]
    """``nn.EmbeddingBag`` of 40 rows; the mask as a bool selection."""

    def __init__(self) -> None:
        super().__init__()
        self.bag = torch.nn.EmbeddingBag(40, 4, mode="mean")

    def forward(self, ids: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        return self.bag(ids) * (keep > 0).any(1, keepdim=True).to(torch.float32)


CASES = [(OneHot, 50), (IndexSelect, 30), (Take, 24), (Bag, 40)]


def _src(obj: Any, fmt: Format = Format.PYTORCH, path: Path | None = None) -> LoadedSource:
    return LoadedSource(fmt, fmt if fmt is Format.ONNX else Format.PYTORCH, path, "test", "torch", "", obj=obj)


def _check(roles: Any, rows: int) -> None:
    assert roles.ranges == {"ids": (0, rows)}, roles.notes
    assert roles.masks == frozenset({"keep"}), roles.notes
    assert "feeds" in roles.notes["keep"]  # known by use, not by its name
    feeds = generate_inputs(SIG, InputConfig(ranges=roles.ranges, masks=roles.masks, samples=3))
    assert all(int(f["ids"].max()) < rows for f in feeds)


@pytest.mark.parametrize(("cls", "rows"), CASES, ids=[c.__name__ for c, _ in CASES])
def test_eager(cls: type, rows: int) -> None:
    torch.manual_seed(0)
    _check(input_roles(_src(cls().eval()), SIG), rows)


@pytest.mark.parametrize(("cls", "rows"), CASES, ids=[c.__name__ for c, _ in CASES])
def test_torchscript(cls: type, rows: int) -> None:
    torch.manual_seed(0)
    _check(input_roles(_src(torch.jit.script(cls().eval()), Format.TORCHSCRIPT), SIG), rows)


@pytest.mark.parametrize(("cls", "rows"), CASES[:3], ids=[c.__name__ for c, _ in CASES[:3]])
def test_onnx(cls: type, rows: int, tmp_path: Path) -> None:
    """(The exporter writes an EmbeddingBag as a Loop, which is not followed.)"""
    torch.manual_seed(0)
    path = tmp_path / "m.onnx"
    x = (torch.zeros(2, 3, dtype=torch.int64), torch.ones(2, 3, dtype=torch.int64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(cls().eval(), x, str(path), input_names=["ids", "keep"], dynamo=False, opset_version=17)
    roles = input_roles(_src(None, Format.ONNX, path), SIG)
    assert roles.ranges == {"ids": (0, rows)}, roles.notes
    assert roles.masks == frozenset({"keep"}), roles.notes
