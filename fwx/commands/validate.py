"""``fwx validate``: a thin click wrapper over ``fwx.validators.pipeline.validate``.

Imports no framework at module import (``fwx validate --help`` stays fast).
Exit codes: 0 all artifacts pass, 1 any fails (all failures listed), 2 bad
input (unreadable data, unknown flags, corrupt artifacts, missing packages).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from fwx import ui
from fwx.commands.options import device_option, trust_option
from fwx.commands.sampling import parse_samples, sample_options
from fwx.errors import UsageError
from fwx.sources.boundary import Admitted


def _int_range(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        lo, hi = (int(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"--int-range {text!r} is not LO,HI", hint="e.g. --int-range 0,30522") from None
    if hi <= lo:
        raise UsageError(f"--int-range {text!r}: HI must be greater than LO (the range is [LO, HI))")
    return lo, hi


@click.command("validate", context_settings={"max_content_width": 100})
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True))
@click.option(
    "--reference",
    default="auto",
    show_default=True,
    help="source, a format (onnx, tflite, ...) or an artifact key; auto = source when it can be rebuilt.",
)
@device_option("running the artifacts")
@click.option(
    "--data",
    type=click.Path(path_type=Path, exists=True),
    help="Inputs: a .npz or a folder of <input>.npy (optional 'labels' for int8 accuracy).",
)
@click.option("--samples", type=click.IntRange(min=1), help="Generated samples (default 4), or rows of --data used.")
@click.option("--seed", default=0, show_default=True, help="Seed for generated inputs.")
@click.option(
    "--int-range",
    metavar="LO,HI",
    help="Range [LO, HI) of every generated integer input (default: as the export drew them, see fwx.json samples).",
)
@sample_options
@click.option(
    "--float-dist",
    type=click.Choice(["normal", "uniform"]),
    default="normal",
    show_default=True,
    help="Generated float inputs: standard normal or uniform [0, 1).",
)
@click.option("--atol", type=float, help="Absolute tolerance for every output (overrides the precision default).")
@click.option("--rtol", type=float, help="Relative tolerance for every output.")
@click.option(
    "--tolerance",
    "tolerances",
    multiple=True,
    metavar="OUTPUT=ATOL[,RTOL]",
    help="Tolerance for one output (repeatable).",
)
@click.option(
    "--report",
    "reports",
    multiple=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the report to a .json or .html file (repeatable).",
)
@click.option("--model-class", help="Class/factory that rebuilds a state_dict source (pkg.mod:Class).")
@click.option("--model-kwargs", help="JSON keyword arguments for --model-class.")
@click.option(
    "--source-model",
    type=click.Path(path_type=Path, exists=True),
    help="The source model to rebuild as the reference (fwx.json's source path is never followed outside "
    "the version folder).",
)
@trust_option("Also lets a factory named in fwx.json rebuild the source. The loader still runs behind every wall.")
@ui.common_options
def validate(
    paths: tuple[Path | Admitted, ...],
    reference: str,
    device: str,
    data: Path | None,
    samples: int | None,
    seed: int,
    int_range: str | None,
    input_ranges: tuple[str, ...],
    input_values: tuple[str, ...],
    validation_data: Path | None,
    float_dist: str,
    atol: float | None,
    rtol: float | None,
    tolerances: tuple[str, ...],
    reports: tuple[Path, ...],
    model_class: str | None,
    model_kwargs: str | None,
    source_model: Path | Admitted | None,
    trust_model_code: bool,
) -> None:
    """Run every format of a model on the same inputs and diff the outputs.

    \b
    PATHS is a model version folder (every artifact in its fwx.json, checksums
    verified first) or artifact files. Generated inputs are drawn as the export
    drew them (fwx.json "samples": token ids within the embedding, a lookup
    table's keys); for loose files, ids within the tables an ONNX file gathers.
      fwx validate artifacts/cnn/1
      fwx validate model.onnx model.tflite --report out.html
      fwx validate artifacts/cnn/1 --tolerance logits=1e-3 --device cuda
    """
    from fwx.validators.pipeline import ValidateOptions
    from fwx.validators.pipeline import validate as run_validate
    from fwx.validators.policy import Policy, parse_tolerance_override

    # the loader admitted every model named here: each is its private copy (a repository folder stays a path)
    copies = [p.path if isinstance(p, Admitted) else p for p in paths]
    source = source_model.path if isinstance(source_model, Admitted) else source_model

    for r in reports:
        if r.suffix.lower() not in (".json", ".html", ".htm"):
            raise UsageError(f"--report {r}: unknown report type", hint="use a .json or .html file name")
    per_output = dict(parse_tolerance_override(t, rtol) for t in tolerances)
    try:
        kwargs = json.loads(model_kwargs) if model_kwargs else None
    except ValueError as exc:
        raise UsageError(
            f"--model-kwargs is not valid JSON: {exc}", hint="e.g. --model-kwargs '{\"width\": 16}'"
        ) from None
    ranges, values = parse_samples(input_ranges, input_values)
    opts = ValidateOptions(
        reference=reference,
        device=device,
        data=data,
        samples=samples,
        seed=seed,
        int_range=_int_range(int_range),
        ranges=ranges,
        values=values,
        validation_data=validation_data,
        float_dist=float_dist,
        policy=Policy(atol=atol, rtol=rtol, per_output=per_output),
        model_class=model_class,
        model_kwargs=kwargs,
        trust_model_code=trust_model_code,
        source=source,
    )
    with ui.step(f"validating {', '.join(str(p) for p in copies)}"):
        report = run_validate(copies, opts)
    for r in reports:
        report.write(r)
        ui.info(f"wrote {r}")
    from fwx.repository import Outbox

    if (box := Outbox.from_env()) is not None:
        box.mark_done()  # the reports are complete: the command's process publishes them
    ui.emit(report.to_json(), report.table)
    if not report.passed:
        sys.exit(1)  # not ctx.exit: click returns its code under standalone_mode=False
