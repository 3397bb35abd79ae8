"""``fwx export --quantize`` end to end (ONNX): the receipt lands in fwx.json and in the validation notes."""

from __future__ import annotations

from pathlib import Path

import pytest

from fwx.converters.base import ConvertOptions
from fwx.errors import UsageError
from fwx.manifest import Manifest
from fwx.quantize import QuantOptions

from .conftest import ROOT, Digits

pytest.importorskip("onnxruntime")
pipeline = pytest.importorskip("fwx.exporter.pipeline")


def _export(digits: Digits, out: Path, targets: list[str], **quant: object) -> object:
    import torch

    weights = digits.folder / "digits_state.pt"
    if not weights.exists():
        torch.save(digits.model.state_dict(), weights)
    opts = ConvertOptions(quant=QuantOptions("int8", **quant))  # type: ignore[arg-type]
    return pipeline.export(
        weights,
        targets,
        pipeline.ExportOptions(
            out=out,
            name="digits",
            model_class="samples.digits:build_model",
            inputs=["image:float32[N,1,8,8]"],
            outputs=["logits"],
            convert=opts,
        ),
    )


@pytest.mark.e2e
def test_export_onnx_int8_records_the_receipt(digits: Digits, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    result = _export(digits, tmp_path, ["onnx"], calibration_data=str(digits.calib), eval_data=str(digits.eval))
    assert result.ok, result.failures  # validated on eval samples, not on noise the model was never calibrated for
    manifest = Manifest.read(result.version_dir)
    entry = manifest.artifacts["onnx"]
    q = entry.quantization
    assert entry.precision == "int8"
    assert q["kind"] == "int8"
    assert q["samples"] == 200
    assert q["eval"]["drop_points"] <= 0.5
    assert q["size_ratio"] >= 3.5
    assert entry.hops[-1]["tool"] == "onnxruntime.quantization"

    from fwx.validators.artifacts import collect

    notes = collect([result.version_dir]).notes
    assert any(n.startswith("onnx: int8 per-channel; minmax on 200 samples") for n in notes), notes


@pytest.mark.e2e
def test_export_refuses_quantize_for_torchscript_before_loading(digits: Digits, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="only onnx, tflite can hold"):
        _export(digits, tmp_path, ["torchscript"], calibration_data=str(digits.calib))
    assert not any(tmp_path.rglob("fwx.json"))


def test_a_budget_every_graph_misses_is_refused_naming_each_graph_and_its_best(
    digits: Digits, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both ONNX exporters' graphs miss a budget no INT8 model meets within one step: the refusal quotes the
    closest graph's best, names that graph, and says what the other reached (not only the preferred one's)."""
    from fwx.errors import FwxError

    monkeypatch.syspath_prepend(str(ROOT))
    cal, ev = str(digits.calib), str(digits.eval)
    with pytest.raises(FwxError) as info:
        _export(digits, tmp_path, ["onnx"], calibration_data=cal, eval_data=ev, min_cosine=0.99999999, budget_steps=1)
    msg = info.value.message
    assert msg.count("int8 misses the budget") == 1, msg
    assert "(the closest; also tried: pytorch --[torch.onnx" in msg, msg
    assert "TorchScript exporter" in msg, msg
    assert "dynamo exporter" in msg, msg
    assert not list(tmp_path.glob("digits/[0-9]*")), "nothing published"
