"""Run one matrix row (a source kind x an architecture) through ``fwx.exporter.export`` and read its cells.

Shared by ``tests/converters/test_matrix.py`` and ``benchmarks/matrix.py`` so the
test and the published table measure the same thing. A row is exported with
``--to all`` once; only if that raises (one target can break the whole atomic
export) is each target exported on its own, so every cell gets its own verdict
and error line.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fwx.formats import TARGETS
from fwx.signature import Signature, TensorSpec, is_dynamic

from . import matrix_models as mm

MODELS_FILE = Path(mm.__file__).resolve()
KINDS = ("pytorch", "keras", "savedmodel", "onnx")


@dataclass
class Source:
    kind: str
    arch: str
    ref: str  # path or factory reference
    kwargs: dict[str, Any] = field(default_factory=dict)  # extra arguments to export()


@dataclass
class Cell:
    """One (source kind, architecture, target) verdict, as the tests assert it and the benchmark prints it."""

    kind: str
    arch: str
    target: str
    status: str = "error"  # ok | failed (validated, wrong numbers) | error (no artifact)
    validated: bool = False
    max_abs: float | None = None
    dynamic_kept: bool | None = None
    layout: str | None = None
    hops: list[str] = field(default_factory=list)
    seconds: float = 0.0
    sample_shapes: list[dict[str, list[int]]] = field(default_factory=list)
    readback: str = ""
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.status == "ok" and self.validated and self.dynamic_kept is not False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def build_source(kind: str, arch: str, folder: Path) -> Source:
    """Write the source model of ``kind`` for ``arch`` into ``folder`` (PyTorch: state_dict or factory)."""
    a = mm.ARCHS[arch]
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "pytorch":
        kw: dict[str, Any] = {"inputs": list(a.torch_inputs), "outputs": list(a.outputs)}
        if a.image:  # the CNNs as state_dict + class, the rest as factories
            cls = type(mm.build_torch(arch)).__name__
            path = mm.save_state_dict(arch, folder / f"{arch}.pt")
            return Source(kind, arch, str(path), {**kw, "model_class": f"{MODELS_FILE}:{cls}"})
        return Source(kind, arch, f"{MODELS_FILE}:build_{arch}", kw)
    if kind == "keras":
        return Source(kind, arch, str(mm.save_keras(arch, folder / f"{arch}.keras")))
    if kind == "savedmodel":
        return Source(kind, arch, str(mm.save_savedmodel(arch, folder / f"{arch}.savedmodel")))
    if kind == "onnx":
        return Source(kind, arch, str(mm.export_onnx(arch, folder / f"{arch}.onnx")))
    raise ValueError(kind)


def run_row(src: Source, out: Path, **options: Any) -> tuple[list[Cell], dict[str, Any]]:
    """Export ``src`` to every target; returns the cells and, per target, the ExportResult that holds it."""
    from fwx.errors import FwxError
    from fwx.exporter import ExportOptions, export

    t0 = time.perf_counter()
    try:
        result = export(
            src.ref,
            ["all"],
            ExportOptions(out=out, name=f"{src.kind}_{src.arch}", keep_failed=True, **src.kwargs, **options),
        )
    except FwxError as exc:
        results: dict[str, Any] = {}
        cells = [_single(src, out, t, f"--to all: {exc.message}", results, **options) for t in TARGETS]
        return cells, results
    wall = time.perf_counter() - t0
    cells = [cell_from_result(src, t.value, result) for t in TARGETS]
    for c in cells:
        c.seconds = c.seconds or round(wall / len(cells), 2)
    return cells, {t.value: result for t in TARGETS}


def _single(src: Source, out: Path, target: Any, first: str, results: dict[str, Any], **options: Any) -> Cell:
    from fwx.errors import FwxError
    from fwx.exporter import ExportOptions, export

    try:
        result = export(
            src.ref,
            [target],
            ExportOptions(out=out, name=f"{src.kind}_{src.arch}_{target}", keep_failed=True, **src.kwargs, **options),
        )
    except FwxError as exc:
        return Cell(src.kind, src.arch, target.value, error=f"{exc.message} [{first}]")
    results[target.value] = result
    return cell_from_result(src, target.value, result)


def cell_from_result(src: Source, target: str, result: Any) -> Cell:
    cell = Cell(src.kind, src.arch, target)
    entry = result.manifest.artifacts.get(target) if result.manifest else None
    if entry is None:
        skipped = result.manifest.skipped.get(target) if result.manifest else None
        cell.error = f"skipped by --to all: {skipped}" if skipped else "not exported (not requested)"
        return cell
    pinned = result.manifest.sig()
    cell.status = entry.status
    cell.validated = bool(entry.validation.get("passed"))
    worst = [o.get("max_abs") for o in (entry.validation.get("outputs") or {}).values()]
    cell.max_abs = max((float(v) for v in worst if isinstance(v, (int, float))), default=None)
    cell.layout = entry.layout
    cell.hops = [f"{h['source']}->{h['target']} ({h['tool']})" for h in entry.hops]
    cell.seconds = round(sum(float(h.get("seconds", 0.0)) for h in entry.hops), 2)
    cell.readback = str(entry.sig()) if entry.signature else ""
    cell.dynamic_kept = dynamic_kept(pinned, entry.sig(), entry.layout) if entry.signature else False
    report = result.reports.get(target)
    if report is not None:
        cell.sample_shapes = [{k: v["shape"] for k, v in s.items()} for s in report.inputs]
    if not cell.validated:
        cell.error = "; ".join(entry.validation.get("failures") or [])[:300] or None
    return cell


def _axes_in(spec: TensorSpec, layout: str | None, source_layout: str | None) -> tuple[int, ...]:
    """The pinned dynamic axes of ``spec`` as they sit in an artifact of ``layout``."""
    axes = spec.dynamic_axes
    if spec.rank != 4 or not layout or not source_layout or layout == source_layout:
        return axes
    to_nhwc = {0: 0, 1: 3, 2: 1, 3: 2}
    return tuple(to_nhwc[a] if layout == "nhwc" else {v: k for k, v in to_nhwc.items()}[a] for a in axes)


def dynamic_kept(pinned: Signature, readback: Signature, layout: str | None) -> bool:
    """Every dynamic dim of the pinned inputs and outputs is still dynamic in the artifact read back."""
    source_layout = _source_layout(pinned)
    for pinned_specs, got_specs in ((pinned.inputs, readback.inputs), (pinned.outputs, readback.outputs)):
        by_name = {s.name: s for s in got_specs}
        for i, spec in enumerate(pinned_specs):
            got = by_name.get(spec.name) or (got_specs[i] if i < len(got_specs) else None)
            if got is None:
                return False
            for axis in _axes_in(spec, layout, source_layout):
                if axis >= got.rank or not is_dynamic(got.shape[axis]):
                    return False
    return True


def _source_layout(pinned: Signature) -> str | None:
    """The pinned signature's layout: channels (1, 3 or 4) at axis 1 is NCHW, else NHWC."""
    rank4 = [s for s in pinned.inputs if s.rank == 4]
    if not rank4:
        return None
    return "nchw" if rank4[0].shape[1] in (1, 3, 4) else "nhwc"


def sizes_exercised(cell: Cell, pinned: Signature) -> dict[str, set[int]]:
    """For each pinned dynamic (input, axis): the sizes the validator fed."""
    seen: dict[str, set[int]] = {}
    for spec in pinned.inputs:
        for axis in spec.dynamic_axes:
            key = f"{spec.name}:{axis}"
            seen[key] = {s[spec.name][axis] for s in cell.sample_shapes if spec.name in s}
    return seen
