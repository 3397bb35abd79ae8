"""Run the planner's paths for one target until one validates.

Each path's hops run in a hidden ``.work`` folder inside the staging version;
hop outputs are cached by path prefix, so ``--to all`` from Keras converts the
SavedModel once and feeds it to TFLite. A finished artifact is read back with
its runtime (signature and opset held to the pin), then validated against the
source model; the first path that passes is moved to its final name. A path
through a file another target found baking a pinned dynamic axis goes last.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fwx import ui
from fwx.converters.base import ConvertOptions, ConvertResult, EdgeEntry, SourceModel, edge_class
from fwx.converters.plan import POST_QUANTIZED, Plan
from fwx.errors import ExportError, FwxError, InputError, SignatureMismatchError, first_line
from fwx.exporter.hopjob import HopFailed, hop_options, next_source
from fwx.exporter.readback import baked_axes, check_readback
from fwx.exporter.reference_memo import RememberingRuntime
from fwx.formats import ARTIFACT_NAMES, Format
from fwx.frameworks import require
from fwx.quantize.budget import budget_verdict
from fwx.quantize.onnx import quantize_onnx
from fwx.quiet import quiet
from fwx.runtimes.base import Runtime, load_runtime
from fwx.signature import Signature
from fwx.sources.load import LoadedSource
from fwx.sources.onnx_external import external_files, gather_external_data
from fwx.sources.reference import source_runtime
from fwx.sources.samples import InputConfig, generate_inputs
from fwx.validators import validate_runtimes
from fwx.validators.policy import Policy

WORK = ".work"


@dataclass
class HopRun:
    entry: EdgeEntry | None  # None for the identity copy and the ONNX post-quantisation
    result: ConvertResult
    seconds: float


#: A cached hop: the path prefix that made it and whether its last hop was asked to quantise.
HopKey = tuple[tuple[EdgeEntry, ...], bool]


def hop_key(ctx: RunContext, hops: tuple[EdgeEntry, ...], i: int) -> HopKey:
    """The cache key of hop ``i`` of a path: the hops up to it, and whether it quantises (the last hop only)."""
    last = i == len(hops) - 1
    return (hops[: i + 1], bool(last and ctx.options.quantize and hops[i].target not in POST_QUANTIZED))


class Prefetch(Protocol):
    """The helper that converts a later hop in another process (``fwx.exporter.prefetch.Prefetcher``)."""

    def begin(self, ctx: RunContext, target: Format) -> None: ...
    def offer(self, ctx: RunContext) -> None: ...
    def take(self, ctx: RunContext, key: HopKey) -> HopRun | None: ...
    def close(self) -> None: ...


@dataclass
class Attempt:
    """One path tried for one target: its hops, read-back signature, validation and verdict."""

    plan: Plan
    hops: list[HopRun] = field(default_factory=list)
    readback: Signature | None = None
    names: dict[str, str] = field(default_factory=dict)  # fwx name -> the artifact's own, where they differ
    opset: int | None = None
    report: Any = None  # ValidationReport
    error: FwxError | None = None
    runtime_version: str = ""
    notes: list[str] = field(default_factory=list)
    prefix: HopKey | None = None  # the cached hop whose file is this attempt's artifact (None: a copy or post-step)

    @property
    def result(self) -> ConvertResult:
        return self.hops[-1].result

    @property
    def passed(self) -> bool:
        return self.error is None and (self.report is None or bool(self.report.passed))


@dataclass
class RunContext:
    """Everything shared by the targets of one export."""

    src: LoadedSource
    signature: Signature
    options: ConvertOptions
    staging: Path
    validate: bool
    device: str
    layout: str | None
    inputs: list[dict[str, Any]] | None  # validator inputs from --example-inputs, else generated
    expected: Signature | None = None  # what artifacts must read back as (the pin, fixed with --static-shapes)
    input_config: InputConfig | None = None  # how generated validation samples are drawn (ranges, values)
    sample_inputs: dict[str, Any] = field(default_factory=dict)  # name -> array: what hops trace and check with
    other_sizes: dict[str, int] = field(default_factory=dict)  # the second probe sizes (symbol -> size)
    reference: Runtime | None = None
    cache: dict[HopKey, HopRun] = field(default_factory=dict)
    failed: dict[HopKey, FwxError] = field(default_factory=dict)
    suspect: dict[tuple[EdgeEntry, ...], FwxError] = field(default_factory=dict)  # prefixes whose file bakes a size
    counter: int = 0
    prefetch: Prefetch | None = None  # the helper process converting a later hop meanwhile (--prefetch)
    pinned_source: Path | None = None  # the ONNX source with the pinned sizes written in (``source_file``)

    def source_file(self) -> Path | None:
        """The file the first hop converts (or copies): the source, or, for an ONNX source whose pin fixes an
        axis the file leaves dynamic, a copy with those sizes written in (``fwx.exporter.onnx_pins``)."""
        if self.pinned_source is None:
            from fwx.exporter.onnx_pins import convert_file  # an ONNX source's pins only

            self.pinned_source = convert_file(self.src, self.signature, self.staging / WORK / "pinned")
        return self.pinned_source

    def work_path(self, fmt: Format) -> Path:
        """A fresh path named like the final artifact (TorchScript names its archive root after it)."""
        self.counter += 1
        folder = self.staging / WORK / str(self.counter)
        folder.mkdir(parents=True)
        return folder / ARTIFACT_NAMES.get(fmt, fmt.value)


# Every error from a conversion hop names the hop: ``onnx -> savedmodel (fwx-onnx-tf): ...``. A user reading
# one error line for a 3-hop path needs to know which tool failed; cached failures are re-raised as they are.


def hop_label(entry: EdgeEntry) -> str:
    return f"{entry.source} -> {entry.target} ({edge_class(entry).tool})"


def named(exc: FwxError, label: str) -> FwxError:
    """``exc`` with ``label: `` in front of its message (only once), type and fields kept."""
    if not exc.message.startswith(f"{label}: "):
        exc.message = f"{label}: {exc.message}"
        exc.args = (exc.message, *exc.args[1:])
    return exc


@contextlib.contextmanager
def hop_errors(label: str) -> Iterator[None]:
    """Prefix errors raised inside with the hop's label; a crash becomes a one-line ``ExportError``."""
    try:
        yield
    except FwxError as exc:
        named(exc, label)
        raise
    except HopFailed as exc:  # a converter in the prefetch process raised: the same line as in-process
        raise ExportError(
            f"{label}: failed: {exc}", hint="rerun with --prefetch off --debug for the traceback"
        ) from None
    except Exception as exc:
        if ui.state.debug:
            raise
        raise ExportError(f"{label}: failed: {first_line(exc)}", hint="rerun with --debug for the traceback") from exc


def run_target(ctx: RunContext, target: Format, plans: list[Plan]) -> list[Attempt]:
    """Try ``plans`` in order; stop at the first that passes. Returns every attempt made, in ``plans`` order.

    A path through a suspect prefix (a file another target read back with a
    pinned dynamic axis fixed, wrong at other sizes) is tried only after every
    other path failed: if one passes, the suspect path is recorded as passed
    over without converting it; if none does, it runs as before, so what is
    published, failed or skipped is what it was without the reordering.
    """
    order = sorted(plans, key=lambda p: suspect(ctx, p) is not None)
    if ctx.prefetch is not None:
        ctx.prefetch.begin(ctx, target)
    attempts: list[Attempt] = []
    for plan in order:
        attempt = _attempt(ctx, target, plan)
        attempts.append(attempt)
        if attempt.passed:
            place(ctx, target, attempt)
            break
        if len(plans) > 1:
            why = attempt.error.message if attempt.error else "; ".join(attempt.report.failures()[:2])
            ui.info(f"  path {plan.describe()} did not work: {why}")
    if attempts[-1].passed:
        tried = {a.plan for a in attempts}
        attempts += [Attempt(p, error=suspect(ctx, p)) for p in order if p not in tried and suspect(ctx, p)]
    return sorted(attempts, key=lambda a: plans.index(a.plan))


def _attempt(ctx: RunContext, target: Format, plan: Plan) -> Attempt:
    attempt = Attempt(plan)
    try:
        _convert(ctx, target, attempt)
        try:
            _check(ctx, target, attempt)
        except InputError as exc:  # inputs the source model ran: the converter's output is what is broken
            raise ExportError(
                f"the {target} artifact of {plan.describe()} cannot run inputs the source model ran: {exc.message}",
                hint="the converter wrote a model its runtime cannot run; `fwx export --plan` lists other paths",
            ) from exc
    except FwxError as exc:
        attempt.error = exc
    except Exception as exc:  # noqa: BLE001 - a read-back bug must not take down the other targets
        attempt.error = ExportError(
            f"reading back the {target} artifact of {plan.describe()} failed: {first_line(exc)}",
            hint="rerun with --debug for the traceback",
        )
        if ui.state.debug:
            raise
    return attempt


def suspect(ctx: RunContext, plan: Plan) -> FwxError | None:
    """Why ``plan`` is tried last: the verdict on the first file along it known to bake a dynamic axis."""
    for i in range(1, len(plan.hops)):
        why = ctx.suspect.get(plan.hops[:i])
        if why is not None:
            return why
    return None


def place(ctx: RunContext, target: Format, attempt: Attempt) -> None:
    """Move (or copy, if another target owns it) the attempt's artifact to its final name."""
    final = ctx.staging / ARTIFACT_NAMES[target]
    for name in attempt.result.extra.get("files", []):  # ONNX external data sits next to its model
        _place(attempt.result.path.parent / name, final.parent / name)
    _place(attempt.result.path, final)
    _repoint(ctx, attempt, final)


def _place(path: Path, final: Path) -> None:
    if path == final:
        return
    if final.exists():
        shutil.rmtree(final) if final.is_dir() else final.unlink()
    final.parent.mkdir(parents=True, exist_ok=True)
    if WORK in path.parts:
        path.rename(final)
    else:  # a cached artifact of another target: copy, do not steal it
        shutil.copytree(path, final) if path.is_dir() else shutil.copy2(path, final)


def _repoint(ctx: RunContext, attempt: Attempt, final: Path) -> None:
    old = attempt.result.path
    for hop in ctx.cache.values():
        if hop.result.path == old:
            hop.result.path = final
    attempt.result.path = final


def _convert(ctx: RunContext, target: Format, attempt: Attempt) -> None:
    hops = attempt.plan.hops
    if not hops:
        with hop_errors(f"{ctx.src.plan_format} -> {target} (copy)"):
            attempt.hops.append(_identity(ctx, target))
        if not (ctx.options.quantize and target in POST_QUANTIZED):
            return  # an ONNX source exported to ONNX with --quantize is quantised below, not copied as is
    prev: ConvertResult | None = None
    for i, entry in enumerate(hops):
        last = i == len(hops) - 1
        key = hop_key(ctx, hops, i)
        if key in ctx.failed:
            raise ctx.failed[key]  # the same hop already failed for another path or target
        if key not in ctx.cache:
            try:
                with hop_errors(hop_label(entry)), ui.step(hop_label(entry), sub=True):
                    ctx.cache[key] = _hop(ctx, entry, prev, key, last=last)
            except FwxError as exc:
                ctx.failed[key] = exc
                raise
            finally:
                if ctx.prefetch is not None:  # a file was just written: the helper may start on a later hop
                    ctx.prefetch.offer(ctx)
        hop = ctx.cache[key]
        attempt.hops.append(hop)
        attempt.prefix = key
        prev = hop.result
    if ctx.options.quantize and target in POST_QUANTIZED:
        attempt.prefix = None
        with hop_errors(f"{target} -> {target} (quantize {ctx.options.quantize})"):
            attempt.hops.append(_post_quantize(ctx, target, attempt.result))


def _hop(ctx: RunContext, entry: EdgeEntry, prev: ConvertResult | None, key: HopKey, *, last: bool) -> HopRun:
    cls = edge_class(entry)
    cls.check_available()
    if ctx.prefetch is not None:  # the helper process converted (or is converting) this hop: its answer
        taken = ctx.prefetch.take(ctx, key)
        if taken is not None:
            return taken
    if prev is None:
        src = SourceModel(
            ctx.src.plan_format,
            ctx.source_file(),
            ctx.signature,
            obj=ctx.src.obj,
            layout=ctx.layout,
            opset=ctx.src.opset,
            sample_inputs=ctx.sample_inputs,
            other_sizes=ctx.other_sizes,
        )
    else:  # an intermediate fwx wrote: its SavedModel signature is serving_default
        src = next_source(entry, prev, sample_inputs=ctx.sample_inputs, other_sizes=ctx.other_sizes)
    opts = hop_options(ctx.options, chained=prev is not None, quantize=last and entry.target not in POST_QUANTIZED)
    converter = cls()
    out = ctx.work_path(entry.target)
    t0 = time.perf_counter()
    converter.precheck(src, opts)
    result = converter.convert(src, out, opts)
    return HopRun(entry, result, time.perf_counter() - t0)


def _identity(ctx: RunContext, target: Format) -> HopRun:
    """Source format == target: copy it in (a SavedModel with another signature key is re-signed; an ONNX
    source whose pin fixes a dynamic axis is copied with the pinned sizes written in)."""
    path = ctx.source_file()
    assert path is not None
    out = ctx.work_path(target)
    t0 = time.perf_counter()
    key = ctx.options.saved_model_signature
    pinned = " with the pinned sizes written in" if path != ctx.src.path else ""
    if target is Format.SAVEDMODEL and key != "serving_default":
        tf = require("tensorflow", "re-signing SavedModels")
        with quiet():
            loaded = tf.saved_model.load(str(path))
            tf.saved_model.save(loaded, str(out), signatures={"serving_default": loaded.signatures[key]})
        tool = f"tf.saved_model.save (signature {key} as serving_default)"
    elif target is Format.ONNX and external_files(path):
        extra = gather_external_data(path, out)
        tool = f"copy{pinned} (external data gathered into {', '.join(extra)})"
        result = ConvertResult(
            out, ctx.signature, tool=tool, layout=ctx.layout, opset=ctx.src.opset, extra={"files": extra}
        )
        return HopRun(None, result, time.perf_counter() - t0)
    else:
        shutil.copytree(path, out) if path.is_dir() else shutil.copy2(path, out)
        tool = f"copy{pinned}"
    result = ConvertResult(out, ctx.signature, tool=tool, layout=ctx.layout, opset=ctx.src.opset)
    return HopRun(None, result, time.perf_counter() - t0)


def _post_quantize(ctx: RunContext, target: Format, float_result: ConvertResult) -> HopRun:
    """ONNX quantisation is a post-processing step on the float file (``fwx.quantize.onnx``)."""
    out = ctx.work_path(target)
    t0 = time.perf_counter()
    with quiet():
        assert ctx.options.quant is not None
        info = quantize_onnx(float_result.path, out, ctx.signature, ctx.options.quant, graph=float_result.tool)
    result = ConvertResult(
        out,
        float_result.signature,
        tool=info.tool,
        tool_version=info.tool_version,
        layout=float_result.layout,
        opset=info.opset or float_result.opset,
        precision=info.precision,
        extra={"quantization": info.to_json(), "warnings": list(info.warnings)},
    )
    return HopRun(None, result, time.perf_counter() - t0)


def _check(ctx: RunContext, target: Format, attempt: Attempt) -> None:
    """Read the artifact back with its runtime, then validate it against the source model."""
    res = attempt.result
    kw: dict[str, Any] = {"signature_name": "serving_default"} if target is Format.SAVEDMODEL else {}
    expect_opset = ctx.options.opset if target is Format.ONNX and ctx.options.opset else res.opset
    with quiet(native=True):
        rt = load_runtime(
            target,
            res.path,
            device=ctx.device,
            signature_hint=res.signature,
            trust_model_code=True,
            precision=res.precision,
            **kw,
        )
    try:
        attempt.readback = rt.signature()
        attempt.names = rt.native_names()
        attempt.runtime_version = rt.runtime_version
        try:
            attempt.opset = check_readback(
                target,
                res.path,
                ctx.expected or ctx.signature,
                attempt.readback,
                opset=expect_opset,
                precision=res.precision,
                layouts=(ctx.layout, res.layout),
            )
        except SignatureMismatchError:
            _suspect_baked_prefix(ctx, target, attempt, rt, res)
            raise
        if ctx.validate:
            with quiet(python=False, native=True), ui.step(f"validate {target} against the source", sub=True):
                attempt.report = _validate(ctx, target, rt, res)
            _use(ctx, target, rt, attempt.report)
            if not attempt.report.passed:  # only now: a passing artifact pays nothing for it
                with quiet(python=False, native=True), ui.step(f"locate where {target} leaves tolerance", sub=True):
                    _locate(ctx, target, rt, attempt)
    finally:
        rt.close()


def _locate(ctx: RunContext, target: Format, rt: Runtime, attempt: Attempt) -> None:
    """Name the first node out of tolerance (``fwx.exporter.locating``), against the nearest ONNX on the path."""
    from fwx.exporter.locating import Intermediate, locate_target  # after a failure only: no cost when all pass
    from fwx.validators.locate import Side

    res = attempt.result
    onnx_hops = [
        Intermediate(h.result.path, h.result.tool, h.result.layout)
        for h in attempt.hops[:-1]
        if h.result.path.suffix == ".onnx" and h.result.precision == "fp32"
    ]
    sig = ctx.expected or ctx.signature
    with quiet():
        samples = ctx.inputs if ctx.inputs is not None else generate_inputs(sig, ctx.input_config or InputConfig())
        locate_target(
            attempt.report,
            target.value,
            source=Side(reference(ctx), f"source ({ctx.src.format})", ctx.layout),
            artifact=Side(rt, str(target), res.layout, res.precision),
            intermediates=onnx_hops,
            samples=samples,
            signature=sig,
        )


def _use(ctx: RunContext, target: Format, rt: Runtime, report: Any) -> None:
    """The source's own check of the artifact, run the way the model is used (a decoder with a cache generates
    tokens step by step); its failures count like wrong numbers."""
    check = ctx.src.extras.check
    if check is None or not report.artifacts:
        return
    with quiet(python=False, native=True), ui.step(f"use {target} as the model is used", sub=True):
        errors, notes = check(rt)
    report.artifacts[-1].errors.extend(errors)
    report.artifacts[-1].notes.extend(notes)


def _suspect_baked_prefix(ctx: RunContext, target: Format, attempt: Attempt, rt: Runtime, res: ConvertResult) -> None:
    """Mark the path prefix whose artifact fixes a pinned dynamic axis and is wrong at other sizes.

    Other targets convert this file further (a ``.pt2`` source's legacy-exported
    ONNX feeds SavedModel, TFLite and TorchScript); a size fixed in its graph
    stays fixed through later hops, so their paths through it go last
    (``run_target``). The declared shape alone is not trusted: the artifact is
    run at every validation size first, and only one that is wrong there (or
    crashes) is marked.
    """
    if attempt.prefix is None or attempt.prefix[1] or not ctx.validate or attempt.readback is None:
        return
    baked = baked_axes(ctx.expected or ctx.signature, attempt.readback, (ctx.layout, res.layout))
    if not baked:
        return
    with quiet(python=False, native=True):
        report = _validate(ctx, target, rt, res)
    if report.passed:
        return
    hops = attempt.prefix[0]
    why = (report.failures() or ["it fails validation"])[0]
    ctx.suspect[hops] = SignatureMismatchError(
        f"not tried: the {target} written by {hop_label(hops[-1])} fixes a pinned dynamic axis ({baked[0]}) "
        f"and is wrong at other sizes ({why})",
        hint="another path passed; `fwx export --plan` lists them all",
    )


def _validate(ctx: RunContext, target: Format, rt: Runtime, res: ConvertResult) -> Any:
    key = target.value
    budget = budget_verdict(res.extra.get("quantization"))
    with quiet():
        report = validate_runtimes(
            reference(ctx),
            {key: rt},
            signature=ctx.expected or ctx.signature,
            precisions={key: res.precision},
            layouts={key: res.layout},
            reference_layout=ctx.layout,
            inputs=ctx.inputs,
            input_config=ctx.input_config,
            reference_key=f"source ({ctx.src.format})",
            policy=Policy(int8_budget=budget),
        )
    for art in report.artifacts:
        art.judged_by = budget
    return report


def reference(ctx: RunContext) -> Runtime:
    """The source model as a runtime (built once per export, each sample run once; the pipeline closes it)."""
    if ctx.reference is None:
        with quiet():
            built = source_runtime(
                ctx.src,
                ctx.signature,
                device=ctx.device,
                signature_name=ctx.options.saved_model_signature,
                trust_model_code=ctx.options.trust_model_code,
            )
        ctx.reference = RememberingRuntime(built)
    return ctx.reference
