"""Export a model ``--to all`` quietly and hold it to all five targets; the published ONNX graph's nodes back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

FIVE = ["onnx", "pt2", "savedmodel", "tflite", "torchscript"]


def export_to_every_format(src: Path, out: Path, name: str) -> list[Any]:
    """Every target published (none skipped or failed); the nodes of the published ONNX graph, in order."""
    import onnx

    from fwx import ui
    from fwx.exporter import ExportOptions, export

    ui.state.quiet = True
    try:
        result = export(src, ["all"], ExportOptions(out=out, name=name))
    finally:
        ui.state.quiet = False
    assert result.ok, result.failures
    assert result.manifest is not None
    assert result.version_dir is not None
    assert sorted(result.manifest.artifacts) == FIVE, result.manifest.skipped
    onnx_file = result.version_dir / result.manifest.artifacts["onnx"].path
    return list(onnx.load(str(onnx_file)).graph.node)
