"""``fwx inspect``: signatures and metadata without running model code (PyTorch-side formats)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from exporter.fixtures import CNN_CLASS, CNN_INPUT, _reset_ui, _samples_importable, cli
from exporter.fixtures import torch_files as torch_files

__all__ = ["_reset_ui", "_samples_importable", "cli", "torch_files"]


@pytest.fixture(scope="module")
def version_dir(torch_files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    from fwx.exporter import ExportOptions, export

    res = export(
        torch_files["state_dict"],
        ["torchscript", "pt2", "onnx"],
        ExportOptions(
            out=tmp_path_factory.mktemp("repo"),
            model_class=CNN_CLASS,
            inputs=[CNN_INPUT],
            outputs=["logits"],
            validate=False,
        ),
    )
    return res.version_dir


def inspect_json(cli: Any, *args: Any) -> dict[str, Any]:
    res = cli("inspect", *args, "--json")
    assert res.code == 0, res.err
    return json.loads(res.out)  # type: ignore[no-any-return]


def test_version_folder(cli: Any, version_dir: Path) -> None:
    info = inspect_json(cli, version_dir)
    assert info["format"] == "version folder"
    assert info["version"] == 1
    assert sorted(info["artifacts"]) == ["onnx", "pt2", "torchscript"]
    assert info["artifacts"]["onnx"]["opset"] == 17
    human = cli("inspect", version_dir)
    assert "model cnn version 1" in human.out
    assert "pytorch -> torchscript" in human.out
    models = inspect_json(cli, version_dir.parent)
    assert models == {"path": str(version_dir.parent), "format": "model folder", "versions": [1]}


def test_onnx_artifact(cli: Any, version_dir: Path) -> None:
    info = inspect_json(cli, version_dir / "model.onnx")
    assert info["signature"]["inputs"] == [{"name": "image", "dtype": "float32", "shape": ["N", 3, 32, 32]}]
    assert info["signature"]["outputs"][0]["name"] == "logits"
    assert info["metadata"]["opset"] == 17
    assert info["metadata"]["op_types"]["Conv"] == 3


def test_torchscript_is_read_as_text_unless_trusted(cli: Any, version_dir: Path) -> None:
    info = inspect_json(cli, version_dir / "model.torchscript.pt")
    assert info["metadata"]["forward"] == "forward(image: Tensor) -> Tensor"
    assert "schema" not in info["metadata"]
    assert any("--trust-model-code" in n for n in info["notes"])
    trusted = inspect_json(cli, version_dir / "model.torchscript.pt", "--trust-model-code")
    assert "image" in trusted["metadata"]["schema"]
    assert trusted["metadata"]["parameters"] > 1000


def test_pt2_artifact(cli: Any, version_dir: Path) -> None:
    info = inspect_json(cli, version_dir / "model.pt2")
    assert info["signature"]["inputs"] == [{"name": "image", "dtype": "float32", "shape": ["N", 3, 32, 32]}]
    assert info["metadata"]["outputs"] == 1


def test_state_dict(cli: Any, torch_files: dict[str, Path]) -> None:
    info = inspect_json(cli, torch_files["state_dict"])
    assert info["metadata"]["unsafe_globals"] == []
    assert info["metadata"]["parameters"] > 1000
    assert any("--model-class" in n for n in info["notes"])


def test_code_carrying_pickle_is_described_not_loaded(cli: Any, torch_files: dict[str, Path]) -> None:
    info = inspect_json(cli, torch_files["evil"])
    assert any("system" in g for g in info["metadata"]["unsafe_globals"])
    assert not torch_files["sentinel"].exists()


def test_missing_path(cli: Any, tmp_path: Path) -> None:
    res = cli("inspect", tmp_path / "nope.onnx")
    assert res.code == 2
    assert len(res.error_lines) == 1
    assert "does not exist" in res.error_lines[0]
