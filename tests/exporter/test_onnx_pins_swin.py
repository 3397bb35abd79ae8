"""A tiny Hugging Face Swin (64 px, window 4) from ONNX and TorchScript: what reaches ``.pt2``.

Its ``maybe_pad`` computes ``F.pad``'s list from shapes (the translator keeps it as sizes:
``tests/converters/onnx_torch/test_sym_grid.py``). With a dynamic height and width, torch.export proves the
program only for some sizes (a stage with one window is not among them), so the ``.pt2`` is skipped with that
reason and the pin that helps; pinned, every target is reached.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from fwx.converters.base import ConvertOptions
from fwx.exporter import ExportOptions, export
from fwx.signature import Signature

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.slow


def tiny_swin() -> Any:
    """Hugging Face's Swin for image classification, 64 px images, 5 logits, random weights, eval mode."""
    from fwx.sources.hf import import_transformers

    transformers = import_transformers()
    torch.manual_seed(0)
    cfg = transformers.SwinConfig(
        image_size=64, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2], window_size=4, num_labels=5
    )
    swin = transformers.SwinForImageClassification(cfg).eval()

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.swin = swin

        def forward(self, x: Any) -> Any:
            return self.swin(pixel_values=x).logits

    return Logits().eval()


def swin_onnx(path: Path, *, dynamic_hw: bool) -> Path:
    axes = {0: "N", 2: "H", 3: "W"} if dynamic_hw else {0: "N"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            tiny_swin(),
            (torch.randn(2, 3, 64, 64),),
            str(path),
            input_names=["x"],
            output_names=["y"],
            dynamic_axes={"x": axes, "y": {0: "N"}},
            dynamo=False,
            opset_version=17,
        )
    return path


@pytest.fixture(scope="module")
def swin_hw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return swin_onnx(tmp_path_factory.mktemp("swin") / "swin.onnx", dynamic_hw=True)


def test_a_dynamic_size_swin_pinned_reaches_all_five_targets(swin_hw: Path, tmp_path: Path) -> None:
    res = export(swin_hw, ["all"], ExportOptions(out=tmp_path, inputs=["x:float32[N,3,64,64]"]))
    assert res.manifest is not None
    assert sorted(res.manifest.artifacts) == ["onnx", "pt2", "savedmodel", "tflite", "torchscript"]
    for fmt, entry in res.manifest.artifacts.items():
        assert Signature.from_json(entry.signature).inputs[0].shape[1:] == (3, 64, 64), fmt
        assert entry.validation["passed"], (fmt, entry.validation)


def test_a_dynamic_size_swin_says_why_pt2_is_skipped(swin_hw: Path, tmp_path: Path) -> None:
    res = export(swin_hw, ["onnx", "pt2"], ExportOptions(out=tmp_path, keep_failed=True))
    assert res.manifest is not None
    why = res.manifest.skipped.get("pt2") or str(res.manifest.failed.get("pt2"))
    assert "torch.export specialised the program to some sizes" in why, why


def test_a_torchscript_swin_reaches_pt2_through_onnx(tmp_path: Path) -> None:
    """TorchScript cannot be given to torch.export; its ONNX export can, now that the pads stay sizes."""
    src = tmp_path / "swin.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.trace(tiny_swin(), torch.randn(2, 3, 64, 64)).save(str(src))
    opts = ExportOptions(
        out=tmp_path / "repo", inputs=["x:float32[N,3,64,64]"], convert=ConvertOptions(trust_model_code=True)
    )
    res = export(src, ["pt2"], opts)
    assert res.manifest is not None
    entry = res.manifest.artifacts["pt2"]
    assert [h["target"] for h in entry.hops] == ["onnx", "pt2"]
    assert entry.validation["passed"], entry.validation
