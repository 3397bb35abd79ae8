"""PyTorch sources -> TorchScript, .pt2 and ONNX through the library API, with real runtimes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fwx.errors import ExportError, InputError, UnsafeModelError, UsageError
from fwx.exporter import ExportOptions, export
from fwx.formats import Format
from fwx.manifest import Manifest, sha256_path
from fwx.repository import Repository

from .fixtures import CNN_CLASS, CNN_INPUT, ROOT, TOYS


@pytest.fixture(scope="module")
def cnn_all(torch_files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("repo")
    return export(
        torch_files["state_dict"],
        ["torchscript,pt2", "onnx"],
        ExportOptions(
            out=out,
            model_class=CNN_CLASS,
            inputs=[CNN_INPUT],
            outputs=["logits"],
            command="fwx export cnn.pt --to torchscript,pt2 --to onnx",
        ),
    )


def test_state_dict_to_every_torch_target(cnn_all: Any) -> None:
    m: Manifest = cnn_all.manifest
    assert cnn_all.ok
    assert sorted(m.artifacts) == ["onnx", "pt2", "torchscript"]
    assert cnn_all.version_dir.name == "1"
    for key, entry in m.artifacts.items():
        path = cnn_all.version_dir / entry.path
        assert path.exists(), key
        assert entry.sha256 == sha256_path(path)
        assert entry.size_bytes > 1000
        assert entry.status == "ok"
        assert entry.validation["passed"] is True, (key, entry.validation)
        assert entry.validation["outputs"]["logits"]["max_abs"] < 1e-4
        assert entry.hops
        assert entry.hops[0]["tool_version"].startswith("2.")
        assert entry.tool_versions["torch"].startswith("2.")
        assert entry.sig().input_names == ["image"]
        assert entry.sig().output_names == ["logits"]
        assert entry.sig().inputs[0].shape[1:] == (3, 32, 32)
        assert entry.layout == "nchw"
    assert m.artifacts["onnx"].opset == 17
    Manifest.read(cnn_all.version_dir).verify(cnn_all.version_dir)


def test_manifest_records_source_and_command(cnn_all: Any, torch_files: dict[str, Path]) -> None:
    m = cnn_all.manifest
    assert m.source.sha256 == sha256_path(torch_files["state_dict"])
    assert m.source.framework == "torch"
    assert m.source.format == "pytorch"
    assert Path(m.source.path).is_absolute()
    assert m.command == "fwx export cnn.pt --to torchscript,pt2 --to onnx"
    assert str(m.sig()) == "(image:float32[N,3,32,32]) -> (logits:float32[N,10])"
    assert m.created
    assert m.fwx_version


def test_onnx_keeps_the_dynamic_batch(cnn_all: Any) -> None:
    import onnx

    model = onnx.load(str(cnn_all.version_dir / "model.onnx"))
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [17]


def test_factory_as_source(tmp_path: Path) -> None:
    res = export(f"{ROOT}/samples/models.py:build_torch_cnn", ["onnx"], ExportOptions(out=tmp_path, inputs=[CNN_INPUT]))
    assert res.manifest.name == "build_torch_cnn"
    assert res.manifest.source.framework == "torch"
    assert res.manifest.artifacts["onnx"].validation["passed"]


def test_factory_as_model_class_with_kwargs(tmp_path: Path) -> None:
    import torch

    from samples.models import build_torch_cnn

    ckpt = tmp_path / "narrow.pt"
    torch.save(build_torch_cnn(width=8, num_classes=3).state_dict(), ckpt)
    res = export(
        ckpt,
        ["torchscript"],
        ExportOptions(
            out=tmp_path / "repo",
            inputs=["image:float32[N,3,16,16]"],
            model_class="samples.models:build_torch_cnn",
            model_kwargs={"width": 8, "num_classes": 3},
        ),
    )
    assert res.signature.outputs[0].shape == ("N", 3)
    with pytest.raises(InputError, match="does not match samples.models:SmallCNN"):
        export(ckpt, ["torchscript"], ExportOptions(out=tmp_path / "repo", inputs=[CNN_INPUT], model_class=CNN_CLASS))


def test_example_inputs_give_the_signature(tmp_path: Path) -> None:
    feeds = tmp_path / "ex.npz"
    np.savez(feeds, image=np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32))
    res = export(
        f"{ROOT}/samples/models.py:build_torch_cnn", ["pt2"], ExportOptions(out=tmp_path, example_inputs=feeds)
    )
    assert str(res.signature.inputs[0]) == "image:float32[N,3,32,32]"
    assert res.manifest.artifacts["pt2"].validation["passed"]


def test_pickled_torch_nn_module_loads_weights_only(torch_files: dict[str, Path], tmp_path: Path) -> None:
    res = export(
        torch_files["pickled_nn"], ["torchscript", "onnx"], ExportOptions(out=tmp_path, inputs=["x:float32[N,4]"])
    )
    assert res.ok
    assert res.signature.outputs[0].shape == ("N", 2)


def test_pickled_custom_module_needs_trust(torch_files: dict[str, Path], tmp_path: Path) -> None:
    from fwx.converters.base import ConvertOptions

    with pytest.raises(UnsafeModelError, match=r"samples\.models\.SmallCNN"):
        export(torch_files["pickled_custom"], ["onnx"], ExportOptions(out=tmp_path, inputs=[CNN_INPUT]))
    res = export(
        torch_files["pickled_custom"],
        ["onnx"],
        ExportOptions(out=tmp_path, inputs=[CNN_INPUT], convert=ConvertOptions(trust_model_code=True)),
    )
    assert res.ok


def test_reduce_pickle_is_refused_without_running(torch_files: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(UnsafeModelError, match=r"posix\.system|os\.system") as info:
        export(
            torch_files["evil"], ["onnx"], ExportOptions(out=tmp_path, inputs=["x:float32[N,2]"], model_class=CNN_CLASS)
        )
    assert "--trust-model-code" in (info.value.hint or "")
    assert not torch_files["sentinel"].exists()


def test_torchscript_source_needs_trust(torch_files: dict[str, Path], tmp_path: Path) -> None:
    from fwx.converters.base import ConvertOptions

    with pytest.raises(UnsafeModelError, match="TorchScript archive") as info:
        export(torch_files["torchscript"], ["onnx"], ExportOptions(out=tmp_path, inputs=[CNN_INPUT]))
    assert "--trust-model-code" in (info.value.hint or "")
    res = export(
        torch_files["torchscript"],
        ["onnx"],
        ExportOptions(out=tmp_path, inputs=[CNN_INPUT], convert=ConvertOptions(trust_model_code=True)),
    )
    assert res.manifest.source.format == "torchscript"
    assert res.manifest.artifacts["onnx"].validation["passed"]


def test_pt2_source_brings_its_own_signature(torch_files: dict[str, Path], tmp_path: Path) -> None:
    res = export(torch_files["pt2"], ["torchscript", "onnx"], ExportOptions(out=tmp_path))
    assert str(res.signature.inputs[0]) == "image:float32[N,3,32,32]"
    assert res.manifest.source.format == "pt2"
    assert all(e.validation["passed"] for e in res.manifest.artifacts.values())


def test_torchscript_auto_falls_back_to_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fwx.converters.base import ConvertOptions

    res = export(f"{TOYS}:build_unscriptable", ["torchscript"], ExportOptions(out=tmp_path, inputs=["x:float32[N,4]"]))
    entry = res.manifest.artifacts["torchscript"]
    assert entry.hops[0]["tool"] == "torch.jit.trace"
    assert any("torch.jit.script failed" in n and "traced instead" in n for n in entry.notes)
    assert "torch.jit.script failed" in capsys.readouterr().err
    assert entry.validation["passed"]
    # --torchscript-mode script: the edge refuses instead of tracing (the planner may still find another path).
    from fwx.converters.base import SourceModel
    from fwx.converters.torch2torchscript import TorchToTorchScript
    from fwx.signature import Signature, parse_tensor_spec

    from .toy_models import build_unscriptable

    sig = Signature((parse_tensor_spec("x:float32[N,4]"),), (parse_tensor_spec("y:float32[N,3]"),))
    src = SourceModel(Format.PYTORCH, None, sig, obj=build_unscriptable())
    with pytest.raises(ExportError, match="torch.jit.script failed"):
        TorchToTorchScript().convert(src, tmp_path / "m.pt", ConvertOptions(torchscript_mode="script"))


def test_state_dict_without_model_class_is_a_usage_error(torch_files: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="state_dict"):
        export(torch_files["state_dict"], ["onnx"], ExportOptions(out=tmp_path, inputs=[CNN_INPUT]))


def test_versions_increase_and_are_immutable(torch_files: dict[str, Path], tmp_path: Path) -> None:
    kw = {"out": tmp_path, "model_class": CNN_CLASS, "inputs": [CNN_INPUT], "validate": False}
    first = export(torch_files["state_dict"], ["torchscript"], ExportOptions(**kw))
    second = export(torch_files["state_dict"], ["torchscript"], ExportOptions(**kw))
    assert (first.manifest.version, second.manifest.version) == (1, 2)
    assert second.manifest.artifacts["torchscript"].validation == {"skipped": True}
    with pytest.raises(InputError, match="already exists"):
        export(torch_files["state_dict"], ["torchscript"], ExportOptions(version=1, **kw))
    assert Repository(tmp_path).versions("cnn") == [1, 2]


def test_onnx_quantisation_is_a_recorded_post_processing_hop(tmp_path: Path) -> None:
    from fwx.converters.base import ConvertOptions
    from fwx.quantize.options import QuantOptions

    res = export(
        f"{ROOT}/samples/models.py:build_torch_cnn",
        ["onnx"],
        ExportOptions(
            out=tmp_path,
            inputs=[CNN_INPUT],
            convert=ConvertOptions(quant=QuantOptions("int8-dynamic")),
            keep_intermediate=True,
        ),
    )
    entry = res.manifest.artifacts["onnx"]
    assert entry.precision == "int8"
    assert entry.quantization["kind"] == "int8-dynamic"
    assert [h["target"] for h in entry.hops] == ["onnx", "onnx"]
    assert (res.version_dir / entry.hops[0]["path"]).is_file()  # the float model, kept as an intermediate
    assert entry.validation["precision"] == "int8"
    assert entry.validation["passed"]


def test_transformer_exports_without_the_mha_fast_path(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Under no_grad the legacy exporter would trace the fused MHA kernel no opset has, then retry 18-21
    printing "Torch IR graph" screens to fd 1; with the fast path off it exports at opset 17."""
    import torch

    res = export(f"{TOYS}:build_tiny_encoder", ["onnx"], ExportOptions(out=tmp_path, inputs=["ids:int64[N,6]"]))
    entry = res.manifest.artifacts["onnx"] if res.manifest else None
    assert entry is not None
    assert [h["tool"] for h in entry.hops] == ["torch.onnx.export(dynamo=False)"]
    assert entry.opset == 17
    assert entry.validation["passed"] is True
    assert not any("_transformer_encoder_layer_fwd" in n for n in entry.notes), entry.notes
    out, err = capfd.readouterr()
    assert "Torch IR graph" not in out + err
    assert torch.backends.mha.get_fastpath_enabled()  # restored after the export


def test_to_all_still_fails_on_wrong_numbers(tmp_path: Path) -> None:
    """--to all never publishes wrong numbers: when every target validated wrong, nothing is published."""
    from fwx.converters.base import ConvertOptions
    from fwx.errors import ValidationError

    from .fixtures import numbered_versions

    with pytest.raises(ValidationError, match="validation failed"):
        export(
            f"{TOYS}:build_baked_batch",
            ["all"],
            ExportOptions(out=tmp_path, inputs=["x:float32[N,6]"], convert=ConvertOptions(torchscript_mode="trace")),
        )
    assert numbered_versions(tmp_path) == []


def test_onnx_declares_the_output_axes_the_pin_fixes(tmp_path: Path) -> None:
    """The legacy exporter cannot size an output resized to its input's shape and names every axis
    (``Resizey_dim_1``: torchvision's LRASPP, 3 classes); servers publish those dims as the model's
    metadata, so the file is written with the pinned sizes (the batch stays ``N``)."""
    import onnx
    import torch
    import torch.nn.functional as F

    class Seg(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 2, 3, stride=2, padding=1)

        def forward(self, x: Any) -> Any:
            return F.interpolate(self.conv(x), size=x.shape[-2:], mode="bilinear", align_corners=False)

    src = tmp_path / "seg.pt2"
    torch.export.save(
        torch.export.export(Seg().eval(), (torch.randn(2, 3, 16, 16),), dynamic_shapes=({0: torch.export.Dim("b")},)),
        src,
    )
    res = export(src, ["onnx"], ExportOptions(out=tmp_path / "repo"))
    assert res.ok, res.failures
    assert res.manifest.artifacts["onnx"].hops[-1]["tool"] == "torch.onnx.export(dynamo=False)"
    out = onnx.load(str(res.version_dir / res.manifest.artifacts["onnx"].path)).graph.output[0]
    dims = [d.dim_value or d.dim_param for d in out.type.tensor_type.shape.dim]
    assert dims == ["N", 2, 16, 16]
