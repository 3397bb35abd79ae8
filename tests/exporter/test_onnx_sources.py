"""ONNX sources: output axes are settled by running the model, not by its ``dim_param`` names."""

from __future__ import annotations

from pathlib import Path

import pytest

from fwx.exporter import ExportOptions, export

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")


class Hidden64(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


@pytest.fixture(scope="module")
def named_fixed_axis(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The legacy exporter names every axis in ``dynamic_axes``, the fixed hidden size 64 included."""
    path = tmp_path_factory.mktemp("onnx") / "hidden.onnx"
    torch.onnx.export(
        Hidden64().eval(),
        (torch.randn(2, 5, 8),),
        str(path),
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq", 2: "hidden"}},
        dynamo=False,
        opset_version=17,
    )
    return path


def test_a_named_but_fixed_output_axis_is_pinned_fixed(named_fixed_axis: Path, tmp_path: Path) -> None:
    import onnx

    declared = [
        d.dim_param or d.dim_value for d in onnx.load(str(named_fixed_axis)).graph.output[0].type.tensor_type.shape.dim
    ]
    assert declared == ["batch", "seq", "hidden"]
    res = export(named_fixed_axis, ["onnx", "pt2"], ExportOptions(out=tmp_path))
    assert res.ok
    assert res.signature.outputs[0].shape == ("N", "seq", 64)
    assert sorted(res.manifest.artifacts) == ["onnx", "pt2"]
    assert not res.manifest.skipped


def test_a_float16_onnx_source_is_judged_at_half_precision(tmp_path: Path) -> None:
    """An ONNX file of ``model.half()`` (what teams ship to save memory) computes in float16 in every runtime,
    and correct runtimes differ by float16 rounding (3e-3 on torchvision's ResNet-18): held to fp32's
    1e-4, every artifact failed. TFLite, whose builtins compute in float32, is skipped naming the cause."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)
    )
    with torch.no_grad():
        net[0].weight.mul_(64.0)  # logits of order 10, as a trained classifier's
    src = tmp_path / "half.onnx"
    torch.onnx.export(
        net.eval().half(),
        (torch.randn(2, 64).half(),),
        str(src),
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "N"}, "y": {0: "N"}},
        dynamo=False,
        opset_version=17,
    )
    res = export(src, ["all"], ExportOptions(out=tmp_path / "repo"))
    entry = res.manifest.artifacts["torchscript"]
    assert entry.validation["passed"], entry.validation
    y = entry.validation["outputs"]["y"]
    assert y["rtol"] == 0.01
    assert y["max_abs"] > 1e-3
    assert "TFLite builtins on half-precision tensors" in res.manifest.skipped.get("tflite", ""), res.manifest.skipped
