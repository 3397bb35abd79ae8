"""Dynamic image height and width from a TorchScript or ONNX source: sampled at sizes the model can run.

fwx traces at 2-5 px and validates at 8 and 12 px; a ConvNeXt-like model (stride-4 stem, three stride-2
downsamplings) cannot run below 32 px, so nothing was published (an ONNX source converted every target
before the reference failed at 8x8). The sizes are now found on the source before any conversion.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fwx.converters.base import ConvertOptions
from fwx.errors import InputError
from fwx.exporter import ExportOptions, export

torch = pytest.importorskip("torch")


class TinyConvNeXt(torch.nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 4, stride=4)
        self.down = torch.nn.Sequential(*(torch.nn.Conv2d(8, 8, 2, stride=2) for _ in range(3)))
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.down(torch.relu(self.stem(x))).mean((2, 3)))


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("images")
    model = TinyConvNeXt().eval()
    torch.jit.save(torch.jit.script(model), root / "convnext.pt")
    axes = {"x": {0: "N", 2: "H", 3: "W"}, "y": {0: "N"}}
    with torch.no_grad():
        torch.onnx.export(
            model, (torch.randn(1, 3, 64, 64),), root / "convnext.onnx", input_names=["x"], output_names=["y"],
            dynamic_axes=axes, dynamo=False, opset_version=17,
        )  # fmt: skip
    return root


def _sizes(result: object) -> dict[str, list[int]]:
    version = Path(result.version_dir)  # type: ignore[attr-defined]
    return dict(json.loads((version / "fwx.json").read_text())["samples"]["sizes"])


def test_an_onnx_source_is_validated_at_sizes_it_runs(sources: Path, tmp_path: Path) -> None:
    result = export(sources / "convnext.onnx", ["onnx"], ExportOptions(out=tmp_path))
    assert result.ok
    assert _sizes(result) == {"H": [32, 64], "W": [32, 96]}


def test_a_torchscript_source_is_traced_and_validated_at_sizes_it_runs(sources: Path, tmp_path: Path) -> None:
    opts = ExportOptions(out=tmp_path, inputs=["x:float32[N,3,H,W]"], convert=ConvertOptions(trust_model_code=True))
    result = export(sources / "convnext.pt", ["onnx"], opts)
    assert result.ok
    assert _sizes(result) == {"H": [32, 64], "W": [32, 96]}


def test_a_model_that_runs_at_no_size_fails_before_converting(sources: Path, tmp_path: Path) -> None:
    opts = ExportOptions(
        out=tmp_path, inputs=["x:float32[N,4,H,W]"], convert=ConvertOptions(trust_model_code=True)
    )  # 4 channels: no size helps
    with pytest.raises(InputError, match="runs at none of the image sizes"):
        export(sources / "convnext.pt", ["onnx"], opts)
