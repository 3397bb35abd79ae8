"""``fwx.exporter.export``: load, pin, plan, convert, read back, validate, publish atomically.

Everything is assembled in the repository's hidden staging folder; the version
folder appears (by rename) only once every target has passed, so a failed or
killed export leaves no numbered folder behind. ``--keep-failed`` publishes
failed artifacts too, marked ``status: "failed"`` in fwx.json.
"""

from __future__ import annotations

import datetime as _dt
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fwx import __version__, ui
from fwx.converters.base import ConvertOptions
from fwx.converters.plan import Plan, best_plans, reachable
from fwx.errors import FwxError, UsageError, ValidationError
from fwx.exporter import manifest_build as mb
from fwx.exporter.pinning import guess_layout, load_example_inputs, make_feeds, probe_sizes
from fwx.exporter.resolve import pin_signature
from fwx.exporter.runner import WORK, Attempt, RunContext, place, run_target
from fwx.exporter.sources import LoadedSource, is_factory_ref, load_source
from fwx.formats import ARTIFACT_NAMES, TARGETS, Format, detect_format, parse_format
from fwx.manifest import Manifest
from fwx.repository import Repository
from fwx.signature import Signature, TensorSpec, parse_tensor_spec


@dataclass
class TargetRow:
    """One line of the summary: what happened to one requested format."""

    format: Format
    status: str  # ok | failed
    path: str | None = None  # relative to the version folder
    size_bytes: int = 0
    plan: str = ""
    check: str = ""
    signature: str = ""
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"format": self.format.value, "status": self.status, "path": self.path, "size_bytes": self.size_bytes,
                "plan": self.plan, "check": self.check, "signature": self.signature, "error": self.error}


@dataclass
class ExportResult:
    manifest: Manifest | None
    version_dir: Path | None
    rows: list[TargetRow]
    signature: Signature
    failures: list[str] = field(default_factory=list)
    reports: dict[str, Any] = field(default_factory=dict)  # target -> ValidationReport

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "version_dir": str(self.version_dir) if self.version_dir else None,
                "name": self.manifest.name if self.manifest else None,
                "version": self.manifest.version if self.manifest else None,
                "signature": self.signature.to_json(), "targets": [r.to_json() for r in self.rows],
                "failures": self.failures, "manifest": self.manifest.to_json() if self.manifest else None}


def parse_targets(values: Sequence[str | Format]) -> list[str | Format]:
    """``--to`` values, repeated and/or comma separated; ``all`` stays a marker until the source is known."""
    out: list[str | Format] = []
    for value in values:
        parts = [value] if isinstance(value, Format) else [p for p in str(value).split(",") if p.strip()]
        for part in parts:
            fmt = part if isinstance(part, Format) else ("all" if part.strip().lower() == "all" else parse_format(part))
            if fmt not in out:
                out.append(fmt)
    if not out:
        raise UsageError("no target format given", hint="pass --to torchscript|pt2|savedmodel|onnx|tflite|all")
    for fmt in out:
        if isinstance(fmt, Format) and fmt not in TARGETS:
            raise UsageError(f"{fmt} is not an export target", hint=f"use one of: {', '.join(t.value for t in TARGETS)}, all")
    return out


def start_format(source: str | Path) -> Format:
    """Where the planner starts for ``source``, from content detection only (nothing is loaded)."""
    if isinstance(source, str) and is_factory_ref(source):
        return Format.PYTORCH
    fmt = detect_format(source)
    return Format.PYTORCH if fmt in (Format.TORCHSCRIPT, Format.PT2) else fmt


def resolve_targets(start: Format, targets: Sequence[str | Format], opts: ConvertOptions) -> dict[Format, list[Plan]]:
    """Every requested target with its paths, cheapest first; raises before any heavy work."""
    wanted: list[Format] = []
    for t in targets:
        for fmt in (reachable(start, opts) if t == "all" else [t]):
            if isinstance(fmt, Format) and fmt not in wanted:
                wanted.append(fmt)
    if not wanted:
        raise UsageError(f"no target is reachable from {start}", hint="run `fwx export --plan` to see the paths")
    return {fmt: best_plans(start, fmt, opts) for fmt in sorted(wanted, key=TARGETS.index)}


def plan_only(source: str | Path, targets: Sequence[str | Format], options: ConvertOptions | None = None
              ) -> dict[str, list[str]]:
    """``--plan``: the paths each target would try, in order, without loading the model."""
    opts = options or ConvertOptions()
    plans = resolve_targets(start_format(source), parse_targets(targets), opts)
    return {fmt.value: [p.describe() for p in found] for fmt, found in plans.items()}


def export(source: str | Path, targets: Sequence[str | Format], *, out: str | Path = "artifacts",
           name: str | None = None, version: int | None = None, inputs: Sequence[str | TensorSpec] = (),
           outputs: Sequence[str] = (), example_inputs: str | Path | Mapping[str, Any] | None = None,
           model_class: str | None = None, model_kwargs: Mapping[str, Any] | None = None,
           options: ConvertOptions | None = None, validate: bool = True, keep_failed: bool = False,
           keep_intermediate: bool = False, device: str = "cpu", command: str = "") -> ExportResult:
    """Export ``source`` to ``targets`` into ``out/<name>/<version>/`` and return what was published.

    Raises ``FwxError`` subclasses for anything a user can fix; on a failed
    validation raises ``ValidationError`` (nothing published) unless ``keep_failed``.
    """
    opts = replace(options) if options else ConvertOptions()  # sample_inputs is filled in below
    specs = [s if isinstance(s, TensorSpec) else parse_tensor_spec(s) for s in inputs]
    examples = dict(example_inputs) if isinstance(example_inputs, Mapping) else \
        (load_example_inputs(example_inputs) if example_inputs else None)
    if opts.quantize:  # name the formats that can hold it, before the planner only says "no path"
        from fwx.quantize.options import check_target

        for fmt in parse_targets(targets):
            if isinstance(fmt, Format):
                check_target(fmt, opts.quantize)
    plans = resolve_targets(start_format(source), parse_targets(targets), opts)
    repo = Repository(out)
    model_name = name or default_name(source)
    repo.model_dir(model_name)  # validates the name before any heavy work
    with ui.step(f"load {source}"):
        src = load_source(source, model_class=model_class, model_kwargs=model_kwargs,
                          trust=opts.trust_model_code, signature_name=opts.saved_model_signature)
    with ui.step("pin signature"):
        sig = pin_signature(src, specs, outputs, examples)
    ui.info(f"  {sig}")
    _check_quantize(plans, opts, sig)
    if examples is None and opts.quantize:  # validate int8 on real samples, not on noise it was never calibrated for
        from fwx.quantize.options import validation_examples

        examples = validation_examples(opts, sig)
    return _run(repo, model_name, version, src, sig, plans, opts, examples, validate=validate, keep_failed=keep_failed,
                keep_intermediate=keep_intermediate, device=device, command=command)


def default_name(source: str | Path) -> str:
    text = str(source)
    if isinstance(source, str) and is_factory_ref(source):
        return text.rpartition(":")[2]
    stem = Path(text.rstrip("/")).name
    for suffix in (".pt2", ".pth", ".pt", ".keras", ".h5", ".onnx", ".tflite", ".savedmodel"):
        if stem.endswith(suffix):
            return stem[: -len(suffix)] or "model"
    return stem or "model"


def _check_quantize(plans: Mapping[Format, list[Plan]], opts: ConvertOptions, sig: Signature) -> None:
    if not opts.quantize and not any((opts.quant or {}).get(k) for k in ("calibration_data", "eval_data")):
        return
    from fwx.quantize.options import check_options

    for fmt in plans:
        check_options(fmt, opts, sig)


def _run(repo: Repository, name: str, version: int | None, src: LoadedSource, sig: Signature,
         plans: Mapping[Format, list[Plan]], opts: ConvertOptions, examples: Mapping[str, Any] | None, *,
         validate: bool, keep_failed: bool, keep_intermediate: bool, device: str, command: str) -> ExportResult:
    sizes = probe_sizes(sig.inputs, examples)
    opts.sample_inputs = make_feeds(sig.inputs, sizes[0], examples)
    val_inputs = [make_feeds(sig.inputs, s, examples, seed=i) for i, s in enumerate(sizes)] if examples else None
    layout = guess_layout(sig, src.framework)
    with repo.staging(name, version) as st:
        ctx = RunContext(src, sig, opts, st.path, validate, device, layout, val_inputs)
        chosen: dict[Format, Attempt] = {}
        failures: list[str] = []
        for fmt, found in plans.items():
            with ui.step(f"export {fmt}"):
                attempts = run_target(ctx, fmt, found)
                pick, lines = mb.choose(attempts)
                if pick is None:
                    raise attempts[0].error or ValidationError(f"{fmt}: no path produced an artifact")
                if lines and not keep_failed:
                    raise _validation_error(pick, lines)
            chosen[fmt] = pick
            for warning in (w for hop in pick.hops for w in hop.result.extra.get("warnings", [])):
                ui.warn(f"{fmt}: {warning}")
            failures += lines
            if lines:
                place(ctx, fmt, pick)
        manifest = mb.build_manifest(name, src, sig, chosen, ctx, keep_intermediate=keep_intermediate,
                                     command=command, created=_now(), fwx_version=__version__)
        shutil.rmtree(st.path / WORK, ignore_errors=True)
        with ui.step("publish"):
            final = st.publish(manifest)
    return ExportResult(manifest, final, _rows(manifest, chosen), sig, failures,
                        {fmt.value: a.report for fmt, a in chosen.items() if a.report is not None})


def _rows(manifest: Manifest, chosen: Mapping[Format, Attempt]) -> list[TargetRow]:
    rows = []
    for fmt, attempt in chosen.items():
        entry = manifest.artifacts[fmt.value]
        if attempt.report is None:
            check = "skipped"
        else:
            check = "PASS" if attempt.report.passed else "FAIL"
            worst = _worst_diff(entry.validation)
            check += f" (max abs {worst:.1e})" if worst is not None else ""
        rows.append(TargetRow(fmt, entry.status, entry.path, entry.size_bytes, attempt.plan.describe(), check,
                              str(entry.sig()) if entry.signature else ""))
    return rows


def _worst_diff(validation: Mapping[str, Any]) -> float | None:
    outputs = validation.get("outputs") or {}
    values = [o.get("max_abs") for o in outputs.values() if isinstance(o, dict)]
    nums = [float(v) for v in values if isinstance(v, (int, float))]
    return max(nums) if nums else None


def _validation_error(attempt: Attempt, lines: list[str]) -> ValidationError:
    if attempt.report is not None and not ui.state.json:
        ui.info(attempt.report.table())
    more = f" (+{len(lines) - 1} more)" if len(lines) > 1 else ""
    return ValidationError(f"validation failed: {lines[0]}{more}",
                           hint="nothing was published; --keep-failed publishes it marked failed, "
                                "--no-validate skips the check")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


__all__ = ["ARTIFACT_NAMES", "ExportResult", "FwxError", "TargetRow", "export", "plan_only"]
