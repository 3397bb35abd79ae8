"""When no path makes a target, the error (and a ``--to all`` skip) names the failure that says most: the path
that got furthest, not the first path's "Exporting a ScriptModule is not supported", true of every TorchScript."""

from __future__ import annotations

from pathlib import Path

import pytest

from fwx.converters.base import ConvertOptions
from fwx.errors import FwxError
from fwx.exporter import ExportOptions, export

torch = pytest.importorskip("torch")


class DataDependent(torch.nn.Module):  # type: ignore[misc]
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nonzero(x > 0).shape[0] * x  # ONNX NonZero: the ONNX -> torch translator refuses it


def test_a_torchscript_source_names_the_failure_of_the_path_really_tried(tmp_path: Path) -> None:
    src = tmp_path / "nz.pt"
    torch.jit.save(torch.jit.script(DataDependent().eval()), src)
    opts = ExportOptions(
        out=tmp_path / "repo", inputs=["x:float32[N,8]"], convert=ConvertOptions(trust_model_code=True)
    )
    with pytest.raises(FwxError) as info:
        export(src, ["pt2"], opts)
    assert "ScriptModule" not in info.value.message
    assert "NonZero" in info.value.message
