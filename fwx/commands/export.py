"""``fwx export``: a thin wrapper over ``fwx.exporter.export`` (imports no framework at load)."""

from __future__ import annotations

import functools
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import click

from fwx import ui
from fwx.commands.options import SectionedCommand, device_option, renamed, resolve_device, trust_option
from fwx.commands.sampling import parse_samples, sample_options
from fwx.converters.base import TORCHSCRIPT_MODES, ConvertOptions
from fwx.formats import LAYOUTS
from fwx.quantize.options import IO_DTYPES, KINDS, METHODS, quant_options
from fwx.sources.boundary import Admitted, admitted

#: ``fwx export --help`` in sections: 45 options in one list hide the few a first export needs.
SECTIONS = (
    ("Targets", ("targets", "plan", "out", "name", "version", "allow_signature_change")),
    (
        "Source model",
        ("model_class", "model_kwargs", "task", "weights", "external_data_dir", "signature_name", "trust_model_code"),
    ),
    ("Inputs and outputs", ("inputs", "outputs", "example_inputs", "input_ranges", "input_values")),
    ("Conversion", ("opset", "torchscript_mode", "layout", "static_shapes", "prefetch", "keep_intermediate")),
    ("Validation", ("validate", "validation_data", "device", "keep_failed")),
    (
        "Quantisation",
        (
            "quantize",
            "calibration_data",
            "calibration_method",
            "calibration_samples",
            "per_channel",
            "weight_bits",
            "io_dtype",
            "strict_int8",
            "preprocess",
        ),
    ),
    (
        "Accuracy budget (int8)",
        ("eval_data", "max_drop", "min_cosine", "min_agreement", "budget_steps", "eval_holdout"),
    ),
)


@click.command("export", cls=SectionedCommand, sections=SECTIONS, context_settings={"max_content_width": 100})
@click.argument("source")
@click.option(
    "--to",
    "targets",
    multiple=True,
    default=("all",),
    show_default=True,
    metavar="FORMATS",
    help="torchscript, pt2, savedmodel, onnx, tflite or all; repeat or comma-separate.",
)
@click.option(
    "--input",
    "inputs",
    multiple=True,
    metavar="NAME:DTYPE[DIMS]",
    help="Pin an input, e.g. image:float32[N,3,224,224] (a symbol or -1 is dynamic). Repeatable.",
)
@click.option("--output", "outputs", multiple=True, metavar="NAME", help="Name an output, in order. Repeatable.")
@click.option(
    "--example-inputs",
    type=click.Path(dir_okay=False),
    metavar="FILE.npz",
    help="Arrays keyed by input name; give dtype/shape (first axis dynamic) and feed tracing/validation.",
)
@sample_options
@click.option("--model-class", metavar="PKG.MOD:NAME", help="Class or factory that rebuilds a state_dict's model.")
@click.option("--model-kwargs", metavar="JSON", help="Keyword arguments for --model-class (or a factory source).")
@click.option(
    "--task",
    metavar="TASK",
    help="What a Hugging Face folder exports (text-classification, text-generation-with-past, ...; "
    "default: from its config). See docs/huggingface.md.",
)
@click.option(
    "--external-data-dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    metavar="DIR",
    help="Where a loose .onnx file's external data lives (default: only plain files beside it that hold "
    "nothing but its tensors).",
)
@click.option(
    "--weights",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Weights (.safetensors, or a state_dict pickle) for the module a factory SOURCE builds.",
)
@trust_option("The loader still runs behind every wall (only --no-sandbox takes them down).")
@click.option(
    "--signature",
    "signature_name",
    default="serving_default",
    show_default=True,
    help="SavedModel signature to export from.",
)
@click.option(
    "--torchscript-mode",
    type=click.Choice(TORCHSCRIPT_MODES),
    default="auto",
    show_default=True,
    help="auto = script, falling back to trace with a warning.",
)
@click.option("--opset", type=click.IntRange(7, 30), help="ONNX opset, written exactly (default 17).")
@click.option(
    "--layout",
    type=click.Choice(LAYOUTS, case_sensitive=False),
    help="Image layout of the artifacts (default: the source's). nhwc moves an NCHW model's channels last "
    "(SavedModel, TFLite).",
)
@click.option(
    "--static-shapes", is_flag=True, help="Fix every dynamic dim (batch 1, others at the sample size) in the artifacts."
)
@click.option(
    "--out",
    "out",
    default="artifacts",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Artifact repository root.",
)
@click.option("--name", help="Model name in the repository (default: the source's stem).")
@click.option(
    "--allow-signature-change",
    is_flag=True,
    help="Publish even if the inputs, outputs or layout differ from the model's previous version.",
)
@click.option(
    "--model-version", "version", type=click.IntRange(min=1), help="Version number to publish (default: next free)."
)
@renamed("--version", "--model-version (fwx --version prints fwx's own version)")
@click.option(
    "--validate/--no-validate",
    default=True,
    show_default=True,
    help="Run every artifact against the source model and fail on a mismatch.",
)
@click.option("--keep-failed", is_flag=True, help="Publish artifacts that failed validation, marked failed.")
@click.option("--keep-intermediate", is_flag=True, help="Keep the intermediate files of multi-hop conversions.")
@click.option("--plan", "plan", is_flag=True, help="Print the conversion path(s) per target and exit.")
@device_option("read-back and validation")
@click.option(
    "--prefetch",
    type=click.Choice(["auto", "on", "off"], case_sensitive=False),
    help="Convert the last target's file->file hops (e.g. SavedModel -> TFLite) in a second process "
    "meanwhile; auto: with 2+ cores, for inputs of 16 MiB or more. Default: $FWX_PREFETCH, else auto.",
)
@click.option("--quantize", type=click.Choice(KINDS), help="Quantise ONNX/TFLite targets.")
@click.option("--calibration-data", metavar="PATH", help="Calibration samples for --quantize int8 (or 'random').")
@click.option(
    "--calibration-method",
    type=click.Choice(METHODS),
    help="How int8 activation ranges are chosen (ONNX; TFLite uses min/max).",
)
@click.option("--calibration-samples", type=click.IntRange(min=1), help="How many calibration samples to use.")
@click.option("--per-channel/--per-tensor", "per_channel", default=None, help="Weight quantisation granularity.")
@click.option(
    "--weight-bits",
    type=click.Choice(["7", "8"]),
    help="ONNX int8 weight bits. Default 7: the same numbers on every CPU; 8 can saturate on x86-64 "
    "without VNNI (AVX2-only), so the model then computes differently there than where it was validated.",
)
@click.option("--io-dtype", type=click.Choice(IO_DTYPES), help="TFLite int8 input/output dtype.")
@click.option("--strict-int8", is_flag=True, help="TFLite: fail if any op cannot run in int8.")
@click.option("--eval-data", metavar="PATH", help="Labelled samples to measure the quantised accuracy.")
@click.option("--preprocess", metavar="SPEC", help="Preprocessing for image calibration/eval folders.")
@click.option(
    "--max-drop",
    type=click.FloatRange(min=0),
    metavar="POINTS",
    help="Accuracy budget: top-1 points int8 may lose on labelled --eval-data; the layers int8 hurts most "
    "stay in float until it holds.",
)
@click.option(
    "--min-cosine",
    type=click.FloatRange(0, 1),
    metavar="C",
    help="Accuracy budget without labels: mean output cosine vs the float model (eval, else calibration data).",
)
@click.option(
    "--min-agreement",
    type=click.FloatRange(0, 1),
    metavar="A",
    help="Accuracy budget without labels: fraction of samples whose top-1 matches the float model.",
)
@click.option("--budget-steps", type=click.IntRange(min=1), help="Layers tried in float at most (default 8).")
@click.option(
    "--eval-holdout",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    metavar="FRACTION",
    help="Budget: the fraction of the eval samples the search never sees; the cost is reported on them "
    "(default 0.5, seed 0).",
)
@ui.common_options
def export(source: str | Admitted, targets: tuple[str, ...], plan: bool, **kw: Any) -> None:
    """Export SOURCE (a model file/folder, or pkg.mod:build_fn) to deployment formats.

    \b
    Examples:
      fwx export cnn.pt --model-class samples.models:SmallCNN --input image:float32[N,3,32,32] --to all
      fwx export model.keras --to savedmodel,tflite
      fwx export model.onnx --plan
    """
    from fwx.exporter import ExportOptions, plan_only
    from fwx.exporter.parts import export_all

    # the loader admitted it (fwx.commands.sandboxing): its private copy is all this command reads
    held = source if isinstance(source, Admitted) else None
    path = str(held.path) if held is not None else str(source)
    opts = _options(kw)
    if plan:
        plans = plan_only(path, targets, opts)
        ui.emit({"plans": plans}, lambda: _plan_text(plans))
        return
    ranges, values = parse_samples(kw["input_ranges"], kw["input_values"])
    eo = ExportOptions(
        out=kw["out"],
        name=kw["name"],
        version=kw["version"],
        inputs=kw["inputs"],
        outputs=kw["outputs"],
        example_inputs=kw["example_inputs"],
        model_class=kw["model_class"],
        model_kwargs=_kwargs(kw["model_kwargs"]),
        convert=opts,
        validate=kw["validate"],
        keep_failed=kw["keep_failed"],
        keep_intermediate=kw["keep_intermediate"],
        device=resolve_device(kw["device"]),
        command=_command_line(),
        input_ranges=ranges,
        input_values=values,
        validation_data=kw["validation_data"],
        task=kw["task"],
        weights=kw["weights"],
        external_data=kw["external_data_dir"],
        allow_signature_change=kw["allow_signature_change"],
        prefetch=kw["prefetch"],
    )
    results = export_all(path, targets, eo)  # one per model a task writes (text2text: encoder, decoder)
    held = held or admitted(path)  # --no-sandbox: the library call admitted it
    left_out = held.left_out if held is not None else ()
    _finished()
    from fwx.safety import walls

    shown = walls.report()  # which walls stood around the loading (none listed for an in-process call)
    for result in results:
        doc = result.to_json() | ({"walls": shown.as_json()} if shown.walls else {})
        doc |= {"left_out": list(left_out)} if left_out else {}
        ui.emit(doc, functools.partial(_summary, result, left_out))
        if result.manifest is not None:
            from fwx.exporter.collision import published_line

            click.echo(published_line(result.manifest), err=ui.state.json)  # its own line; stderr under --json
    if not all(result.ok for result in results):
        sys.exit(1)


def _finished() -> None:
    """Every part is staged: the command's process may publish them all (fwx.repository.Outbox)."""
    from fwx.repository import Outbox

    box = Outbox.from_env()
    if box is not None:
        box.mark_done()


def _options(kw: dict[str, Any]) -> ConvertOptions:
    """The flags as the one typed value every hop reads; a flag that was not given is None, never dropped."""
    quant = quant_options(
        kw["quantize"],
        calibration_data=kw["calibration_data"],
        method=kw["calibration_method"],
        samples=kw["calibration_samples"],
        per_channel=kw["per_channel"],
        io_dtype=kw["io_dtype"],
        strict=kw["strict_int8"],
        eval_data=kw["eval_data"],
        preprocess=kw["preprocess"],
        max_drop=kw["max_drop"],
        min_cosine=kw["min_cosine"],
        min_agreement=kw["min_agreement"],
        budget_steps=kw["budget_steps"],
        eval_holdout=kw["eval_holdout"],
        weight_bits=int(kw["weight_bits"]) if kw["weight_bits"] else None,
    )
    return ConvertOptions(
        opset=kw["opset"],
        layout=kw["layout"],
        static_shapes=kw["static_shapes"],
        torchscript_mode=kw["torchscript_mode"],
        quant=quant,
        trust_model_code=kw["trust_model_code"],
        saved_model_signature=kw["signature_name"],
    )


def _kwargs(text: str | None) -> dict[str, Any]:
    from fwx.sources.load import parse_model_kwargs

    return parse_model_kwargs(text)


def _command_line() -> str:
    """The command as typed when run as ``fwx``; else an equivalent rebuilt from the parsed options."""
    if sys.argv and os.path.basename(sys.argv[0]) in ("fwx", "fwx.exe"):
        return shlex.join(["fwx", *sys.argv[1:]])
    ctx = click.get_current_context()
    parts = ["fwx", "export"]
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        if isinstance(param, click.Argument):
            parts.append(str(value))
        elif isinstance(param, click.Option) and value not in (None, ()) and value != param.get_default(ctx):
            if param.is_flag and isinstance(value, bool):
                flag = param.opts[0] if value else next(iter(param.secondary_opts), "")
                parts += [flag] if flag else []
            else:
                for v in value if isinstance(value, tuple) else (value,):
                    parts += [param.opts[0], str(v)]
    return shlex.join(parts)


def _plan_text(plans: dict[str, list[str]]) -> str:
    rows = [(fmt, i + 1, path) for fmt, paths in plans.items() for i, path in enumerate(paths)]
    return ui.table(["target", "try", "path"], rows)


def _summary(result: Any, left_out: tuple[str, ...] = ()) -> str:
    rows = [
        (
            r.format.value,
            r.path or "-",
            ui.human_size(r.size_bytes) if r.size_bytes else "-",
            r.signature,
            _row_check(r),
        )
        for r in result.rows
    ]
    text = ui.table(["format", "path", "size", "signature", "check"], rows)
    arts = result.manifest.artifacts.items() if result.manifest is not None else []
    for key, entry in arts:
        if entry.quantization:  # the accuracy cost of quantising, right where the user looks
            from fwx.quantize.report import render

            text += "\n\n" + render(entry.quantization, title=f"{key} quantisation:")
    failed = [r for r in result.rows if r.status == "failed" and not r.published]
    if failed:
        text += "\n\nnot published (recorded under `failed` in fwx.json): " + "; ".join(
            f"{r.format}: {r.error}" for r in failed
        )
    read = result.manifest.source.files if result.manifest is not None else {}
    if read:  # a loose file's neighbours fwx read: the user sees exactly which
        text += "\n\nread with the source: " + ", ".join(sorted(read))
    if left_out:  # a Hugging Face folder's other files: never copied, so nothing the loader could read
        text += "\n\nleft out of the copy (not the model's files): " + ", ".join(left_out)
    from fwx.safety import walls

    shown = walls.report()
    return f"{text}\n\nwritten to {result.version_dir}" + (f"\n{shown.line()}" if shown.walls else "")


def _row_check(row: Any) -> str:
    if row.status == "skipped":
        return click.style("skipped", fg="yellow") + f": {row.error}"
    if not row.published:
        return _check(row.check) + " - not published"
    return _check(row.check)


def _check(check: str) -> str:
    if check.startswith("PASS"):
        return click.style("PASS", fg="green", bold=True) + check[4:]
    if check.startswith("FAIL"):
        return click.style("FAIL", fg="red", bold=True) + check[4:]
    return check
