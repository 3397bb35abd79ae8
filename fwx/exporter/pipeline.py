"""``fwx.exporter.export``: load, pin, plan, convert, read back, validate, publish atomically.

Everything is assembled in the repository's hidden staging folder; the version
folder appears (by rename) only once every target has passed, so a failed or
killed export leaves no numbered folder behind. ``--keep-failed`` publishes
failed artifacts too, marked ``status: "failed"`` in fwx.json.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fwx import __version__, ui
from fwx.converters.base import ConvertOptions
from fwx.converters.plan import Plan
from fwx.errors import FwxError
from fwx.exporter.collision import check_new_version, check_pinned
from fwx.exporter.manifest_build import build_manifest
from fwx.exporter.options import ExportOptions, prefetch_mode
from fwx.exporter.outcome import blocking_error, run_targets, warn_skipped
from fwx.exporter.pinning import guess_layout, load_example_inputs
from fwx.exporter.prefetch import Prefetcher, prefetch_bytes
from fwx.exporter.resolve import pin_signature
from fwx.exporter.runner import WORK, RunContext
from fwx.exporter.summary import TargetRow
from fwx.exporter.targets import (
    FORMAT_LAYOUT,
    Selection,
    copied_formats,
    decide,
    parse_targets,
    run_order,
    start_format,
)
from fwx.formats import ARTIFACT_NAMES, Format
from fwx.manifest import Manifest
from fwx.quantize.options import check_options, check_target, validation_examples
from fwx.repository import Repository, model_name_for
from fwx.safety.snapshot import original
from fwx.signature import Signature, static_signature
from fwx.sources.boundary import admit, names_a_model
from fwx.sources.input_roles import input_roles
from fwx.sources.load import LoadedSource, is_factory_ref, load_source
from fwx.sources.lookup_tables import lookup_values
from fwx.sources.samples import check_names, dynamic_symbols, make_feeds, probe_sizes
from fwx.validators.inputs import load_data


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
    source = admitted_source(source, eo)
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


def admitted_source(source: str | Path, eo: ExportOptions) -> str | Path:
    """The private copy of a model path, admitted once at the boundary (format and hash with it): every later
    step reads the copy, trusted or not; a factory reference or a missing path (load says so) stays as given."""
    if not os.path.exists(source):
        return source
    if isinstance(source, str) and is_factory_ref(source):
        return source
    if not names_a_model(Path(source)):
        return source  # a folder that is no model (``fwx export ~``): refused by its names, never copied whole
    copy = admit(source, external_data=eo.external_data).path
    return copy if isinstance(source, Path) else str(copy)


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
    """Export every selected target; publish what may be published (``fwx.exporter.outcome`` decides).

    Raises the first failing target's error, carrying every target's outcome in
    ``FwxError.detail``, when nothing may be published.
    """
    with repo.staging(name, eo.version) as st, _context(src, sig, opts, examples, st.path, eo) as ctx:
        order = run_order(sel.plans)
        ctx.prefetch = Prefetcher(st.path, sel.plans, order, prefetch_mode(eo.prefetch), min_bytes=prefetch_bytes())
        out = run_targets(ctx, sel, keep_failed=eo.keep_failed)
        ctx.prefetch.close()  # every hop it could convert has been taken or is no longer wanted
        warn_skipped(out)
        error = blocking_error(out, sig, keep_failed=eo.keep_failed)
        if error is not None:
            raise error
        manifest = build_manifest(
            name,
            src,
            sig,
            out.chosen,
            ctx,
            keep_intermediate=eo.keep_intermediate,
            command=eo.command,
            created=_now(),
            fwx_version=__version__,
            skipped=out.skipped,
        )
        manifest.failed = out.failed_entries()
        shutil.rmtree(st.path / WORK, ignore_errors=True)
        check_new_version(repo, manifest, allow=eo.allow_signature_change)
        with ui.step("publish"):
            final = st.publish(manifest)
    reports = {fmt.value: a.report for fmt, a in out.chosen.items() if a.report is not None}
    return ExportResult(manifest, final, out.rows(manifest), sig, out.failures(), reports)


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


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


__all__ = ["ARTIFACT_NAMES", "ExportOptions", "ExportResult", "FwxError", "TargetRow", "export", "plan_only"]
