"""The zip bounds hold for a TorchScript archive loaded with --trust-model-code too (they guard memory, not
code): torch's zip reader trusts the sizes an archive declares."""

from __future__ import annotations

from pathlib import Path

import pytest

from fwx.errors import UnsafeModelError
from fwx.formats import Format
from fwx.runtimes.base import load_runtime
from fwx.sources.torch_source import load_torchscript

torch = pytest.importorskip("torch")


def test_a_trusted_torchscript_archive_keeps_the_inflate_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "m.pt"
    torch.jit.script(torch.nn.Linear(64, 64)).save(str(path))
    monkeypatch.setenv("FWX_MAX_INFLATE_MB", "0.001")
    with pytest.raises(UnsafeModelError, match="inflate budget"):
        load_torchscript(path, trust=True)
    with pytest.raises(UnsafeModelError, match="inflate budget"):
        load_runtime(Format.TORCHSCRIPT, path)
    monkeypatch.delenv("FWX_MAX_INFLATE_MB")
    assert load_torchscript(path, trust=True) is not None
    assert load_runtime(Format.TORCHSCRIPT, path) is not None
