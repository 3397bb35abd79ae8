"""The conversion matrix: 4 source kinds x 5 targets x 4 architectures, plus Transformer/LSTM rows.

Each row (source kind, architecture) is exported once with ``--to all``
through ``fwx.exporter.export`` (module-scoped, on first use); each cell is
then asserted from the manifest: status ok, validated (fp32 policy), layout,
dynamic dims kept in the read-back signature, every hop recorded with its tool,
and every dynamic dim fed at two sizes by the validator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fwx.formats import TARGETS
from fwx.signature import Signature

from . import matrix_models as mm
from .matrix_run import KINDS, Cell, Source, build_source, dynamic_kept, run_row, sizes_exercised

CORE_ROWS = [(k, a) for a in mm.CORE for k in KINDS]
SEQ_ROWS = [(k, a) for a in mm.SEQUENCE for k in ("pytorch", "onnx")]
SOURCE_LAYOUT = {"pytorch": "nchw", "onnx": "nchw", "keras": "nhwc", "savedmodel": "nhwc"}

# Cells that fail today, each for a reason outside the matrix (reported to the owner; see docs/matrix.md).
# strict: when the fix lands the cell passes, the xfail turns into a failure, and the mark must go.
KNOWN: dict[tuple[str, str, str], str] = {}


class Row:
    def __init__(self, src: Source, cells: list[Cell], results: dict[str, Any]) -> None:
        self.src, self.results = src, results
        self.cells = {c.target: c for c in cells}

    def entry(self, target: str) -> Any:
        """The manifest entry of ``target`` (from ``--to all``, or its own export when that one failed)."""
        assert target in self.results, self.cells[target].error
        return self.results[target].manifest.artifacts[target]

    def version_dir(self, target: str) -> Path:
        return Path(self.results[target].version_dir)

    @property
    def pinned(self) -> Signature:
        assert self.results, "; ".join(str(c.error) for c in self.cells.values())
        return next(iter(self.results.values())).manifest.sig()


GetRow = Callable[[str, str], Row]


@pytest.fixture(scope="module")
def row(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GetRow]:
    """Export a (kind, arch) row on first use and keep it for the module."""
    from fwx import ui

    ui.state.quiet = True
    root = tmp_path_factory.mktemp("matrix")
    cache: dict[tuple[str, str], Row] = {}

    def get(kind: str, arch: str) -> Row:
        if (kind, arch) not in cache:
            src = build_source(kind, arch, root / "src" / kind)
            cells, results = run_row(src, root / "repo")
            cache[kind, arch] = Row(src, cells, results)
        return cache[kind, arch]

    yield get
    ui.state.quiet = False


def _cells(rows: list[tuple[str, str]]) -> list[Any]:
    out = []
    for k, a in rows:
        for t in TARGETS:
            why = KNOWN.get((k, a, t.value))
            marks = [pytest.mark.xfail(reason=why, strict=True)] if why else []
            out.append(pytest.param(k, a, t.value, id=f"{k}-{a}-{t.value}", marks=marks))
    return out


def check_cell(r: Row, target: str) -> Cell:
    cell = r.cells[target]
    assert cell.status == "ok", cell.error
    assert cell.validated, cell.error
    assert cell.max_abs is not None
    assert cell.max_abs < 1e-4
    assert cell.dynamic_kept, f"read back {cell.readback}, pinned {r.pinned}"
    entry = r.entry(target)
    assert entry.validation["precision"] == "fp32"
    assert (r.version_dir(target) / entry.path).exists()
    hops = entry.hops
    assert hops
    assert all(h["tool"] and (h["tool_version"] or h["tool"] == "copy") for h in hops), hops
    assert hops[-1]["target"] == target
    assert [h["target"] for h in hops[:-1]] == [h["source"] for h in hops[1:]], "hops do not chain"
    for axis, sizes in sizes_exercised(cell, r.pinned).items():
        assert len(sizes) >= 2, f"{axis} validated at {sizes} only"
    return cell


@pytest.mark.parametrize(("kind", "arch", "target"), _cells(CORE_ROWS))
def test_cell(row: GetRow, kind: str, arch: str, target: str) -> None:
    r = row(kind, arch)
    cell = check_cell(r, target)
    # The pinned layout is kept by default: an NCHW model stays NCHW in its TFLite, and so on.
    assert cell.layout == (SOURCE_LAYOUT[kind] if mm.ARCHS[arch].image else None)
    got = r.entry(target).sig()
    assert got.input_names == r.pinned.input_names
    assert sorted(got.output_names) == sorted(r.pinned.output_names)
    assert [s.shape[1:] for s in got.inputs] == [s.shape[1:] for s in r.pinned.inputs]


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "arch", "target"), _cells(SEQ_ROWS))
def test_sequence_cell(row: GetRow, kind: str, arch: str, target: str) -> None:
    """Transformer (int64 ids) and LSTM: batch and sequence length stay dynamic through every hop."""
    r = row(kind, arch)
    check_cell(r, target)
    spec = r.pinned.inputs[0]
    assert spec.dynamic_axes == (0, 1)
    assert spec.dtype == ("int64" if arch == "transformer" else "float32")
    got = r.entry(target).sig().inputs[0]
    assert got.dynamic_axes == (0, 1), got


@pytest.mark.parametrize(("kind", "arch"), [("pytorch", "two_io"), ("savedmodel", "two_io"), ("onnx", "two_io")])
def test_two_inputs_two_outputs_keep_names_and_order(row: GetRow, kind: str, arch: str) -> None:
    r = row(kind, arch)
    pinned = r.pinned
    assert sorted(pinned.input_names) == ["context", "features"]
    assert sorted(pinned.output_names) == ["embedding", "score"]
    for key in r.results:
        entry = r.entry(key)
        assert entry.sig().input_names == pinned.input_names, key
        assert {o.name: o.shape[1:] for o in entry.sig().outputs} == {o.name: o.shape[1:] for o in pinned.outputs}


def test_pytorch_to_tflite_records_three_hops_with_versions(row: GetRow) -> None:
    r = row("pytorch", "resnet")
    entry = r.entry("tflite")
    assert [(h["source"], h["target"]) for h in entry.hops] == [
        ("pytorch", "onnx"),
        ("onnx", "savedmodel"),
        ("savedmodel", "tflite"),
    ]
    assert entry.hops[0]["tool_version"].startswith("2.")  # torch
    assert "tensorflow" in entry.hops[1]["tool_version"]
    # --to all shares the intermediates with the published artifacts of the same version
    assert [h.get("path") for h in entry.hops[:-1]] == ["model.onnx", "model.savedmodel"]
    assert {"torch", "onnx", "tensorflow"} <= set(entry.tool_versions)


def test_dynamic_kept_notices_a_pinned_batch() -> None:
    """The helper the matrix relies on must fail on a batch that came back fixed."""
    pinned = Signature.from_json(
        {
            "inputs": [{"name": "x", "dtype": "float32", "shape": ["N", 3, 8, 8]}],
            "outputs": [{"name": "y", "dtype": "float32", "shape": ["N", 2]}],
        }
    )
    fixed = Signature.from_json(
        {
            "inputs": [{"name": "x", "dtype": "float32", "shape": [1, 3, 8, 8]}],
            "outputs": [{"name": "y", "dtype": "float32", "shape": ["N", 2]}],
        }
    )
    nhwc = Signature.from_json(
        {
            "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 8, 8, 3]}],
            "outputs": [{"name": "y", "dtype": "float32", "shape": [-1, 2]}],
        }
    )
    assert dynamic_kept(pinned, pinned, "nchw")
    assert not dynamic_kept(pinned, fixed, "nchw")
    assert dynamic_kept(pinned, nhwc, "nhwc")
