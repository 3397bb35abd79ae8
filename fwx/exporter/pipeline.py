"""``fwx.exporter.export``: load, pin, plan, convert, read back, validate, publish atomically.

Everything is assembled in the repository's hidden staging folder; the version
folder appears (by rename) only once every target has passed, so a failed or
killed export leaves no numbered folder behind. ``--keep-failed`` publishes
failed artifacts too, marked ``status: "failed"`` in fwx.json.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from fwx import __version__, ui
from fwx.converters.base import ConvertOptions
from fwx.converters.plan import Plan
from fwx.errors import ExportError, FwxError, ValidationError
from fwx.exporter.collision import check_new_version, check_pinned
from fwx.exporter.manifest_build import build_manifest, choose, telling_error
from fwx.exporter.options import ExportOptions, prefetch_mode
from fwx.exporter.pinning import guess_layout, load_example_inputs
from fwx.exporter.prefetch import Prefetcher, prefetch_bytes
from fwx.exporter.resolve import pin_signature
from fwx.exporter.runner import WORK, Attempt, RunContext, place, run_target
from fwx.exporter.targets import (
    FORMAT_LAYOUT,
    Selection,
    copied_formats,
    decide,
    parse_targets,
    run_order,
    start_format,
)
from fwx.formats import ARTIFACT_NAMES, TARGETS, Format
from fwx.manifest import Manifest
from fwx.quantize.options import check_options, check_target, validation_examples
from fwx.repository import Repository, model_name_for
from fwx.safety.snapshot import original
from fwx.signature import Signature, static_signature
from fwx.sources.id_ranges import input_roles
from fwx.sources.load import LoadedSource, is_factory_ref, load_source
from fwx.sources.lookups import lookup_values
from fwx.sources.samples import check_names, dynamic_symbols, make_feeds, probe_sizes
from fwx.validators.inputs import load_data


@dataclass
class TargetRow:
    """One line of the summary: what happened to one requested format."""

    format: Format
    status: str  # ok | failed | skipped (--to all: failed = validated wrong, not published; skipped = no artifact)
    path: str | None = None  # relative to the version folder
    size_bytes: int = 0
    plan: str = ""
    check: str = ""
    signature: str = ""
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format.value,
            "status": self.status,
            "path": self.path,
            "size_bytes": self.size_bytes,
            "plan": self.plan,
            "check": self.check,
            "signature": self.signature,
            "error": self.error,
        }


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
        return {
            "ok": self.ok,
            "version_dir": str(self.version_dir) if self.version_dir else None,
            "name": self.manifest.name if self.manifest else None,
            "version": self.manifest.version if self.manifest else None,
            "signature": self.signature.to_json(),
            "targets": [r.to_json() for r in self.rows],
            "failures": self.failures,
            "skipped": dict(self.manifest.skipped) if self.manifest else {},
            "failed": dict(self.manifest.failed) if self.manifest else {},
            "manifest": self.manifest.to_json() if self.manifest else None,
        }


def plan_only(
    source: str | Path, targets: Sequence[str | Format], options: ConvertOptions | None = None
) -> dict[str, list[str]]:
    """``--plan``: the paths each target would try, in order, without loading the model."""
    start = start_format(source)
    _, sel = decide(
        start,
        parse_targets(targets),
        options or ConvertOptions(),
        FORMAT_LAYOUT.get(start),
        known=start in FORMAT_LAYOUT,
        copies=copied_formats(source),
    )
    return {fmt.value: [p.describe() for p in found] for fmt, found in sel.plans.items()}


def export(source: str | Path, targets: Sequence[str | Format], options: ExportOptions | None = None) -> ExportResult:
    """Export ``source`` to ``targets`` into ``out/<name>/<version>/`` and return what was published.

    Raises ``FwxError`` subclasses for anything a user can fix; on a failed
    validation raises ``ValidationError`` (nothing published) unless ``keep_failed``.
    """
    eo = options or ExportOptions()
    examples = (
        dict(eo.example_inputs)
        if isinstance(eo.example_inputs, Mapping)
        else (load_example_inputs(eo.example_inputs) if eo.example_inputs else None)
    )
    start, wanted, copies = start_format(source), parse_targets(targets), copied_formats(source)
    if eo.convert.quantize:  # name the formats that can hold it, before the planner only says "no path"
        for fmt in wanted:
            if isinstance(fmt, Format):
                check_target(fmt, eo.convert.quantize)
    # The layout of a PyTorch/Keras/SavedModel source is known from its format: plan before loading, so a
    # named target without a path fails fast. An ONNX source's layout is read from its graph, after loading.
    decided = (
        decide(start, wanted, eo.convert, FORMAT_LAYOUT[start], known=True, copies=copies)
        if start in FORMAT_LAYOUT
        else None
    )
    repo = Repository(eo.out)
    model_name = eo.name or default_name(source)
    repo.model_dir(model_name)  # validates the name before any heavy work
    repo.check_writable(model_name)
    with ui.step(f"load {original(Path(source)) if not is_factory_ref(str(source)) else source}"):
        src = load_source(
            source,
            model_class=eo.model_class,
            model_kwargs=eo.model_kwargs,
            trust=eo.convert.trust_model_code,
            signature_name=eo.convert.saved_model_signature,
            task=eo.task,
            weights=eo.weights,
        )
    user = eo.sample_config()
    with ui.step("pin signature"):
        sig = pin_signature(src, eo.specs, eo.outputs, examples, user)
    check_names(user, sig)
    ui.info(f"  {sig}")
    check_pinned(repo, model_name, sig, allow=eo.allow_signature_change)
    layout = guess_layout(sig, src.framework)
    if decided is None or (decided[0].layout and layout is None):  # no 4-D input after all: --layout is dropped
        decided = decide(start, wanted, eo.convert, layout, known=True, copies=copies)
    opts, sel = decided
    _check_quantize(sel.plans, opts, sig)
    if examples is None and opts.quantize:  # validate int8 on real samples, not on noise it was never calibrated for
        examples = validation_examples(opts.quant, sig)
    return _run(repo, model_name, src, sig, sel, opts, examples, eo)


def default_name(source: str | Path) -> str:
    return model_name_for(source, factory=isinstance(source, str) and is_factory_ref(source))


def _check_quantize(plans: Mapping[Format, list[Plan]], opts: ConvertOptions, sig: Signature) -> None:
    for fmt in plans:
        check_options(fmt, opts.quant, sig, opset=opts.opset)


def _run(
    repo: Repository,
    name: str,
    src: LoadedSource,
    sig: Signature,
    sel: Selection,
    opts: ConvertOptions,
    examples: Mapping[str, Any] | None,
    eo: ExportOptions,
) -> ExportResult:
    """Export every selected target; publish what passed.

    A named target that fails raises (nothing is published). Under ``--to all`` a
    target without a working path is skipped, and one that validates wrong is
    left out, recorded in fwx.json's ``failed`` with its numbers, and makes the
    result not ``ok`` (exit 1); the targets that validated are still published.
    """
    skipped = {fmt.value: reason for fmt, reason in sel.skipped.items()}
    with repo.staging(name, eo.version) as st, _context(src, sig, opts, examples, st.path, eo) as ctx:
        chosen: dict[Format, Attempt] = {}
        rejected: dict[Format, tuple[Attempt, list[str]]] = {}
        failures: list[str] = []
        errors: dict[Format, FwxError] = {}
        order = run_order(sel.plans)
        ctx.prefetch = Prefetcher(st.path, sel.plans, order, prefetch_mode(eo.prefetch), min_bytes=prefetch_bytes())
        for fmt in order:
            try:
                with ui.step(f"export {fmt}"):
                    pick, lines = _target(ctx, fmt, sel.plans[fmt])
            except FwxError as exc:
                if fmt not in sel.optional:
                    raise
                skipped[fmt.value] = exc.message
                errors[fmt] = exc
                continue
            if lines and not eo.keep_failed:
                if fmt not in sel.optional:
                    raise _validation_error(pick, lines)
                rejected[fmt] = (pick, lines)
                failures += [f"{fmt}: {line}" for line in lines]
                _show_rejected(fmt, pick, lines)
                continue
            chosen[fmt] = pick
            for warning in (w for hop in pick.hops for w in hop.result.extra.get("warnings", [])):
                ui.warn(f"{fmt}: {warning}")
            failures += lines
            if lines:
                place(ctx, fmt, pick)
        ctx.prefetch.close()  # every hop it could convert has been taken or is no longer wanted
        chosen, rejected, errors = _in_target_order(chosen), _in_target_order(rejected), _in_target_order(errors)
        skipped = {f.value: skipped[f.value] for f in TARGETS if f.value in skipped}
        first = next(iter(errors.values()), None)
        for key, reason in skipped.items():
            if chosen or first is None or reason != first.message:
                ui.warn(f"{key} skipped: {reason}")
        if not chosen:  # nothing to publish: fail with the first target's own error (type and exit code)
            if rejected:
                pick, lines = next(iter(rejected.values()))
                raise _validation_error(pick, lines, shown=True)
            assert first is not None
            raise first
        manifest = build_manifest(
            name,
            src,
            sig,
            chosen,
            ctx,
            keep_intermediate=eo.keep_intermediate,
            command=eo.command,
            created=_now(),
            fwx_version=__version__,
            skipped=skipped,
        )
        manifest.failed = {fmt.value: _failed_entry(fmt, pick, lines) for fmt, (pick, lines) in rejected.items()}
        shutil.rmtree(st.path / WORK, ignore_errors=True)
        check_new_version(repo, manifest, allow=eo.allow_signature_change)
        with ui.step("publish"):
            final = st.publish(manifest)
    return ExportResult(
        manifest,
        final,
        _rows(manifest, chosen),
        sig,
        failures,
        {fmt.value: a.report for fmt, a in chosen.items() if a.report is not None},
    )


_T = TypeVar("_T")


def _in_target_order(by_format: Mapping[Format, _T]) -> dict[Format, _T]:
    """``by_format`` in ``TARGETS`` order (targets run in ``run_order``; fwx.json and errors follow ``TARGETS``)."""
    return {f: by_format[f] for f in TARGETS if f in by_format}


def _failed_entry(fmt: Format, attempt: Attempt, lines: list[str]) -> dict[str, Any]:
    """What fwx.json keeps of a target that validated wrong: the first failure, the path and every number."""
    validation = attempt.report.for_artifact(fmt.value) if attempt.report is not None else {}
    return {"error": f"validation failed: {lines[0]}", "plan": attempt.plan.describe(), "validation": validation}


def _show_rejected(fmt: Format, attempt: Attempt, lines: list[str]) -> None:
    if attempt.report is not None and not ui.state.json:
        ui.info(attempt.report.table())
    more = f" (+{len(lines) - 1} more)" if len(lines) > 1 else ""
    ui.warn(f"{fmt} failed validation and is not published: {lines[0]}{more}")


@contextlib.contextmanager
def _context(
    src: LoadedSource,
    sig: Signature,
    opts: ConvertOptions,
    examples: Mapping[str, Any] | None,
    staging: Path,
    eo: ExportOptions,
) -> Iterator[RunContext]:
    """Samples for tracing (batch 1 with ``--static-shapes``), validator inputs and the signature to hold to.

    The reference runtime built for validation is closed when the export ends.
    """
    sizes = probe_sizes(sig.inputs, examples, src.sizes)
    if opts.static_shapes:
        batch = {s.shape[0] for s in sig.inputs if s.rank and isinstance(s.shape[0], str)}
        sizes = [{k: 1 if k in batch else n for k, n in sizes[0].items()}]
    user = eo.sample_config()
    symbols = dynamic_symbols(sig)
    # integer ids within the embedding's vocabulary where fwx can read it, sizes a .pt2's Dims admit;
    # the user's own win
    roles = input_roles(src, sig)
    cfg = replace(
        user,
        ranges={**roles.ranges, **src.extras.ranges, **user.ranges},  # a config's vocabulary over a traced table
        masks=roles.masks,
        notes={**roles.notes, **user.notes},
        data=(
            *src.extras.samples,  # a Hugging Face folder's tokenized sentences
            *(load_data(eo.validation_data, sig, flag="--validation-data") if eo.validation_data else ()),
        ),
        values={**lookup_values(src, sig), **user.values},
        sizes={**{s: n for s, n in src.sizes.items() if s in symbols}, **user.sizes},
    )
    samples = make_feeds(sig.inputs, sizes[0], examples, cfg=cfg)
    val_inputs = (
        [make_feeds(sig.inputs, s, examples, seed=i, cfg=cfg) for i, s in enumerate(sizes)] if examples else None
    )
    expected = static_signature(sig, samples) if opts.static_shapes else sig
    ctx = RunContext(
        src,
        sig,
        opts,
        staging,
        eo.validate,
        eo.device,
        guess_layout(sig, src.framework),
        val_inputs,
        expected=expected,
        input_config=cfg,
        sample_inputs=samples,
        other_sizes=sizes[-1],
    )
    try:
        yield ctx
    finally:
        if ctx.prefetch is not None:  # an error or Ctrl-C: kill the helper before the staging folder goes
            ctx.prefetch.close()
        if ctx.reference is not None:
            ctx.reference.close()


def _target(ctx: RunContext, fmt: Format, plans: list[Plan]) -> tuple[Attempt, list[str]]:
    """The attempt to publish for ``fmt`` and its validation failures; raises when no path made an artifact."""
    attempts = run_target(ctx, fmt, plans)
    pick, lines = choose(attempts)
    if pick is None:
        raise telling_error(attempts) or ExportError(f"{fmt}: no path produced an artifact")
    return pick, lines


def _rows(manifest: Manifest, chosen: Mapping[Format, Attempt]) -> list[TargetRow]:
    rows = []
    for fmt in TARGETS:
        if fmt.value in manifest.skipped:
            rows.append(TargetRow(fmt, "skipped", error=manifest.skipped[fmt.value]))
        if fmt.value in manifest.failed:
            bad = manifest.failed[fmt.value]
            worst = _worst_diff(bad.get("validation") or {})
            rows.append(
                TargetRow(
                    fmt,
                    "failed",
                    plan=bad.get("plan", ""),
                    error=bad.get("error"),
                    check="FAIL" + (f" (max abs {worst:.1e})" if worst is not None else ""),
                )
            )
        if fmt not in chosen:
            continue
        attempt = chosen[fmt]
        entry = manifest.artifacts[fmt.value]
        if attempt.report is None:
            check = "not validated"
        else:
            check = "PASS" if attempt.report.passed else "FAIL"
            worst = _worst_diff(entry.validation)
            check += f" (max abs {worst:.1e})" if worst is not None else ""
        rows.append(
            TargetRow(
                fmt,
                entry.status,
                entry.path,
                entry.size_bytes,
                attempt.plan.describe(),
                check,
                str(entry.sig()) if entry.signature else "",
            )
        )
    return rows


def _worst_diff(validation: Mapping[str, Any]) -> float | None:
    outputs = validation.get("outputs") or {}
    values = [o.get("max_abs") for o in outputs.values() if isinstance(o, dict)]
    nums = [float(v) for v in values if isinstance(v, (int, float))]
    return max(nums) if nums else None


def _validation_error(attempt: Attempt, lines: list[str], *, shown: bool = False) -> ValidationError:
    if attempt.report is not None and not ui.state.json and not shown:
        ui.info(attempt.report.table())
    more = f" (+{len(lines) - 1} more)" if len(lines) > 1 else ""
    return ValidationError(
        f"validation failed: {lines[0]}{more}",
        hint="nothing was published; --keep-failed publishes it marked failed, --no-validate skips the check",
    )


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


__all__ = ["ARTIFACT_NAMES", "ExportOptions", "ExportResult", "FwxError", "TargetRow", "export", "plan_only"]
