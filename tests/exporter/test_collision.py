"""A new version must keep its model's interface: a different signature or layout is refused unless asked for."""

from __future__ import annotations

from pathlib import Path

from exporter.fixtures import CNN_CLASS, CNN_INPUT, _reset_ui, _samples_importable, cli, numbered_versions
from exporter.fixtures import torch_files as torch_files
from fwx.exporter.collision import interface_changes
from fwx.manifest import ArtifactEntry, Manifest, SourceInfo

__all__ = ["_reset_ui", "_samples_importable", "cli", "torch_files"]

CNN = ["--model-class", CNN_CLASS, "--input", CNN_INPUT, "--to", "torchscript"]
MLP = ["--input", "x:float32[B,4]", "--to", "torchscript"]


def test_same_stem_different_model_is_refused_then_allowed(cli, torch_files, tmp_path: Path) -> None:
    out = tmp_path / "a"
    first = cli("export", torch_files["state_dict"], *CNN, "--name", "model", "--out", out)
    assert first.code == 0, first.err
    assert "published as model/1" in first.out.splitlines()
    # Same interface under another symbol for the dynamic dim: a drop-in new version.
    same = cli(
        "export",
        torch_files["state_dict"],
        "--model-class",
        CNN_CLASS,
        "--input",
        "image:float32[batch,3,32,32]",
        "--to",
        "torchscript",
        "--name",
        "model",
        "--out",
        out,
    )
    assert same.code == 0, same.err
    assert "published as model/2" in same.out.splitlines()

    other = cli("export", torch_files["pickled_nn"], *MLP, "--name", "model", "--out", out)
    assert other.code == 2, other.err
    assert len(other.error_lines) == 1, other.err
    line = other.error_lines[0]
    assert "changes its interface" in line
    assert "image:float32[N,3,32,32] -> x:float32[N,4]" in line
    assert "vs model/2" in line
    assert "--allow-signature-change" in other.err
    assert "• export" not in other.err  # refused before any conversion ran
    assert len(numbered_versions(out)) == 2

    forced = cli("export", torch_files["pickled_nn"], *MLP, "--name", "model", "--out", out, "--allow-signature-change")
    assert forced.code == 0, forced.err
    assert "changes its interface" in forced.err
    assert "published as model/3" in forced.out.splitlines()


def test_published_line_goes_to_stderr_under_json(cli, torch_files, tmp_path: Path) -> None:
    res = cli("export", torch_files["state_dict"], *CNN, "--name", "cnn", "--out", tmp_path, "--json")
    assert res.code == 0, res.err
    assert res.out.lstrip().startswith("{")
    assert "published as cnn/1" in res.err.splitlines()


def _manifest(layout: str | None, shape: list[object]) -> Manifest:
    man = Manifest(
        name="m",
        version=1,
        source=SourceInfo("s", "0" * 64, "pytorch", "torch"),
        signature={
            "inputs": [{"name": "image", "dtype": "float32", "shape": shape}],
            "outputs": [{"name": "y", "dtype": "float32", "shape": [shape[0], 10]}],
        },
    )
    man.artifacts["onnx"] = ArtifactEntry("onnx", "model.onnx", layout=layout)
    return man


def test_interface_changes_sees_layout_and_static_dims_not_symbols() -> None:
    nchw = _manifest("NCHW", ["N", 3, 32, 32])
    assert interface_changes(nchw, _manifest("NCHW", [-1, 3, 32, 32])) == []
    assert interface_changes(nchw, _manifest("NHWC", ["N", 3, 32, 32])) == ["layout NCHW -> NHWC"]
    changes = interface_changes(nchw, _manifest("NCHW", ["N", 3, 64, 64]))
    assert changes == ["inputs image:float32[N,3,32,32] -> image:float32[N,3,64,64]"]
