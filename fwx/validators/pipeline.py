"""``fwx.validators.validate``: validate a model version folder or artifact files end to end.

Steps: resolve the device; collect and checksum-verify the artifacts; load
them (bad input fails here, before anything is measured or written); pick the
reference (the source model when it can be rebuilt, else the highest-precision
artifact, and the report says so); draw or load inputs; ``validate_runtimes``.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from fwx.errors import FwxError, InputError, UsageError, first_line
from fwx.formats import NCHW, NHWC, Format, parse_format
from fwx.manifest import Manifest, sha256_path
from fwx.runtimes.base import Runtime
from fwx.signature import Signature, TensorSpec, is_dynamic
from fwx.sources.boundary import loadable
from fwx.sources.input_roles import onnx_id_ranges
from fwx.sources.load import load_source
from fwx.sources.reference import file_source, source_runtime
from fwx.sources.samples import InputConfig, check_names, generate_inputs, hints_from_json, is_mask, symbol_key
from fwx.validators.artifacts import Artifact, Collection, by_precision, close_all, collect, gpu_visible, load_all
from fwx.validators.inputs import load_data, load_labels
from fwx.validators.judge import validate_runtimes
from fwx.validators.layout import shape_to
from fwx.validators.policy import Policy
from fwx.validators.report import ValidationReport
from fwx.validators.state_dict import attach, set_aside, state_dict_ref


@dataclass
class ValidateOptions:
    reference: str = "auto"  # auto | source | a format name | an artifact key
    device: str = "auto"  # auto | cpu | cuda[:N]
    data: Path | None = None
    samples: int | None = None
    seed: int = 0
    int_range: tuple[int, int] | None = None
    ranges: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # --input-range, over fwx.json's
    values: Mapping[str, tuple[float, ...]] = field(default_factory=dict)  # --input-values, over fwx.json's
    validation_data: Path | None = None  # real samples added to the generated ones (or to --data)
    float_dist: str = "normal"
    policy: Policy = field(default_factory=Policy)
    model_class: str | None = None
    model_kwargs: dict[str, Any] | None = None
    trust_model_code: bool = False
    source: Path | None = None  # the reference model when fwx.json's source lies outside the version folder


def cuda_usable() -> bool:
    """True when a GPU is visible and an installed framework can use it."""
    if not gpu_visible():
        return False
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        import torch

        return bool(torch.cuda.is_available())
    if importlib.util.find_spec("onnxruntime") is not None:
        import onnxruntime as ort

        return "CUDAExecutionProvider" in ort.get_available_providers()
    return False


def resolve_device(device: str) -> tuple[str, list[str]]:
    if device == "auto":
        return ("cuda", []) if cuda_usable() else ("cpu", ["--device auto: no usable CUDA GPU found, ran on CPU"])
    if device.split(":", 1)[0] == "cuda" and not cuda_usable():
        raise UsageError(
            f"--device {device}: no usable CUDA GPU on this machine",
            hint="use --device cpu or auto (or install CUDA builds of the frameworks)",
        )
    if device.split(":", 1)[0] not in ("cpu", "cuda"):
        raise UsageError(f"unknown device {device!r}", hint="use cpu, cuda, cuda:N or auto")
    return device, []


def source_layout(manifest: Manifest | None, sig: Signature) -> str | None:
    """Layout of the pinned signature: the source framework's convention for rank-4 inputs."""
    if manifest is None or not any(s.rank == 4 for s in sig.inputs):
        return None
    fw = manifest.source.framework
    if fw in ("torch", "pytorch"):
        return NCHW
    if fw in ("keras", "tensorflow"):
        return NHWC
    same = [a.layout for a in manifest.artifacts.values() if a.format == manifest.source.format and a.layout]
    return same[0] if same else None


def in_layout(sig: Signature, src: str | None, dst: str | None) -> Signature:
    def move(specs: tuple[TensorSpec, ...]) -> tuple[TensorSpec, ...]:
        return tuple(TensorSpec(s.name, s.dtype, shape_to(s.shape, src, dst)) for s in specs)  # type: ignore[arg-type]

    return sig if src == dst or src is None or dst is None else Signature(move(sig.inputs), move(sig.outputs))


def _flag(command: str, name: str) -> str | None:
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for i, w in enumerate(words):
        if w == name and i + 1 < len(words):
            return words[i + 1]
        if w.startswith(name + "="):
            return w.split("=", 1)[1]
    return None


def _source_path(manifest: Manifest, folder: Path | None, given: Path | None) -> Path | None:
    """The source model to rebuild: the one the user named, else one inside the version folder.

    fwx.json is data: its ``source.path`` is never followed outside the folder it sits in (a hostile
    manifest naming ``~/.ssh`` must not make fwx open it); a source elsewhere is named explicitly.
    """
    if given is not None:
        return given
    raw = PurePosixPath(manifest.source.path.replace("\\", "/"))
    if folder is None or not raw.parts or raw.is_absolute() or ".." in raw.parts:
        return None
    cand = folder / raw
    return cand if cand.exists() and cand.resolve().is_relative_to(folder.resolve()) else None


def load_source_runtime(col: Collection, opts: ValidateOptions, sig: Signature, device: str) -> Runtime:
    """The eager/original source as a runtime; raises ``FwxError`` saying why it cannot be rebuilt."""
    manifest = col.manifest
    assert manifest is not None
    src = manifest.source
    path = _source_path(manifest, col.folder, opts.source)
    if path is None:
        raise InputError(
            f"the source {src.path} lies outside the version folder",
            hint="name it with --source-model to rebuild it as the reference",
        )
    path = loadable(path)  # its admitted private copy, trusted or not: what is hashed is what loads
    if src.sha256 and sha256_path(path) != src.sha256:
        raise InputError(f"the source {path} changed since the export (sha256 differs)")
    fmt = Format(src.format)
    if fmt in (Format.ONNX, Format.SAVEDMODEL, Format.TFLITE):
        return source_runtime(file_source(fmt, path), sig, device=device, trust_model_code=opts.trust_model_code)
    model_class = opts.model_class
    if model_class is None and opts.trust_model_code:
        model_class = _flag(manifest.command, "--model-class")  # importing it runs code: trusted only
    loaded = load_source(path, model_class=model_class, model_kwargs=opts.model_kwargs, trust=opts.trust_model_code)
    return source_runtime(loaded, sig, device=device)


def choose_reference(
    col: Collection, opts: ValidateOptions, sig: Signature, device: str, notes: list[str]
) -> tuple[Runtime, str, Artifact | None]:
    """(runtime, key, artifact or None for the source)."""
    want = opts.reference
    if want in ("auto", "source") and col.manifest is not None:
        try:
            return load_source_runtime(col, opts, sig, device), f"source ({col.manifest.source.format})", None
        except FwxError as exc:
            why = f"{exc.message}; {exc.hint}" if exc.hint else exc.message
        except Exception as exc:  # noqa: BLE001 - a source that will not rebuild is a note, not a crash
            why = first_line(exc, 200)
        best = by_precision(col.artifacts)[0]
        notes.append(f"could not rebuild the source ({why}); the reference is {best.key}")
        assert best.runtime is not None
        return best.runtime, best.key, best
    if want == "source":
        raise UsageError("--reference source needs a version folder whose fwx.json names the source")
    if want == "auto":
        best = by_precision(col.artifacts)[0]
    else:
        keyed = [a for a in col.artifacts if a.key == want]
        if not keyed:
            fmt = parse_format(want)
            keyed = by_precision([a for a in col.artifacts if a.format is fmt])
        if not keyed:
            raise UsageError(f"--reference {want}: no such artifact among {', '.join(a.key for a in col.artifacts)}")
        best = keyed[0]
    assert best.runtime is not None
    return best.runtime, best.key, best


def sample_hints(col: Collection, sig: Signature) -> InputConfig:
    """Where generated inputs may lie, as the export drew them: ``fwx.json``'s ``samples`` (token ids within
    the embedding, a lookup table's keys, the sizes a ``.pt2`` admits). For loose files, the id ranges an
    ONNX artifact's ``Gather``s say and the sizes a ``.pt2`` artifact's ``Dim`` ranges admit. Without them
    ids are drawn from [0, 10), which overflows a 2-row ``token_type_ids`` table, and lengths 8 and 12,
    which ``Dim("frames", min=40)`` refuses."""
    if col.manifest is not None and col.manifest.samples:
        return hints_from_json(col.manifest.samples, sig)
    return InputConfig(ranges=_onnx_id_ranges(col, sig), sizes=_pt2_sizes(col, sig))


def _onnx_id_ranges(col: Collection, sig: Signature) -> dict[str, tuple[int, int]]:
    ids = [s.name for s in sig.inputs if s.dtype.startswith(("int", "uint")) and not is_mask(s.name)]
    for art in col.artifacts if ids else []:
        if art.format is Format.ONNX:
            try:
                return onnx_id_ranges(art.path, ids)
            except Exception:  # noqa: BLE001 - an unreadable graph keeps the default ranges; loading reports it
                break
    return {}


def _pt2_sizes(col: Collection, sig: Signature) -> dict[str, tuple[int, int]]:
    """A loose ``.pt2``'s admitted sizes (``fwx.sources.pt2.pt2_sizes``), keyed as ``sig`` names the same
    axes: input by input, axis by axis, since the signature may have come from another artifact."""
    for art in col.artifacts:
        if art.format is not Format.PT2 or art.runtime is None:
            continue
        from fwx.runtimes.pt2 import ExportedProgramRuntime  # torch is loaded: a .pt2 artifact is
        from fwx.sources.pt2 import pt2_inputs, pt2_sizes

        if not isinstance(art.runtime, ExportedProgramRuntime):
            continue
        ep = art.runtime.program
        specs = pt2_inputs(ep)
        sizes = pt2_sizes(ep, specs)
        if not specs or not sizes or len(specs) != len(sig.inputs):
            return {}
        return {
            symbol_key(ref, axis): sizes[d]
            for mine, ref in zip(specs, sig.inputs, strict=True)
            if mine.rank == ref.rank
            for axis, d in enumerate(mine.shape)
            if isinstance(d, str) and d in sizes and is_dynamic(ref.shape[axis])
        }
    return {}


def build_inputs(
    sig: Signature, opts: ValidateOptions, hints: InputConfig | None = None
) -> tuple[list[dict[str, np.ndarray]], list[Any] | None]:
    """User data (plus its first row alone, so a dynamic batch is tried at two sizes), or generated samples
    (drawn by ``hints``, with ``--input-range`` / ``--input-values`` over them)."""
    if opts.data is None:
        hints = hints or InputConfig()
        cfg = InputConfig(
            seed=opts.seed,
            samples=opts.samples or 4,
            int_range=opts.int_range,
            float_dist=opts.float_dist,
            ranges={**({} if opts.int_range else hints.ranges), **opts.ranges},  # the user's flags win
            values={**hints.values, **opts.values},
            sizes=hints.sizes,
            masks=hints.masks,
            data=tuple(load_data(opts.validation_data, sig, flag="--validation-data")) if opts.validation_data else (),
        )
        check_names(InputConfig(ranges=opts.ranges, values=opts.values), sig)
        return generate_inputs(sig, cfg), None
    samples = load_data(opts.data, sig, samples=opts.samples)
    labels = load_labels(opts.data, opts.samples)
    first = samples[0]
    batched = all(s.rank and is_dynamic(s.shape[0]) for s in sig.inputs)
    if batched and all(v.ndim and v.shape[0] > 1 for v in first.values()):
        samples.append({k: v[:1] for k, v in first.items()})
    label_list = None if labels is None else [labels, labels[:1]][: len(samples)]
    if opts.validation_data:  # unlabelled: after the labelled ones
        samples += load_data(opts.validation_data, sig, flag="--validation-data")
    return samples, label_list


def validate(paths: Sequence[str | Path], options: ValidateOptions | None = None) -> ValidationReport:
    """Validate every artifact against one reference; see the module docstring. Raises only on bad input."""
    opts = options or ValidateOptions()
    device, notes = resolve_device(opts.device)
    col = collect(paths)
    rebuild = state_dict_ref(opts.model_class, opts.model_kwargs)
    loose = set_aside(col, rebuild)  # loose state dicts load last, taking the others' signature
    ref_rt: Runtime | None = None
    try:
        pinned = load_all(
            col, device=device, pinned=col.manifest.sig() if col.manifest else None, trust=opts.trust_model_code
        )
        if rebuild is not None and loose:
            attach(col, loose, rebuild, pinned, device)
        src_layout = source_layout(col.manifest, pinned)
        ref_rt, ref_key, ref_art = choose_reference(col, opts, pinned, device, notes)
        ref_layout = ref_art.layout if ref_art is not None else src_layout
        sig = in_layout(pinned, src_layout, ref_layout)
        cands = {a.key: a.runtime for a in col.artifacts if a is not ref_art and a.runtime is not None}
        if not cands:
            raise UsageError(
                "nothing to compare: only the reference was given",
                hint="pass two or more artifacts, or a version folder whose source is available",
            )
        hints = sample_hints(col, sig)
        samples, labels = build_inputs(sig, opts, hints)
        report = validate_runtimes(
            ref_rt,
            cands,
            signature=sig,
            precisions=_field(col, "precision"),
            layouts=_field(col, "layout"),
            reference_layout=ref_layout,
            inputs=samples,
            labels=labels,
            policy=opts.policy,
            seed=opts.seed,
            reference_key=ref_key,
            input_config=InputConfig(masks=hints.masks, notes=hints.notes),  # masks and notes; samples are given
        )
        if not report.passed:  # only failed artifacts are traced: a passing run costs (and imports) nothing more
            from fwx.validators.locate import Side, locate_failures

            locate_failures(
                report,
                Side(ref_rt, ref_key, ref_layout),
                {a.key: Side(a.runtime, a.key, a.layout, a.precision) for a in col.artifacts if a.runtime is not None},
                samples,
                signature=sig,
                policy=opts.policy,
            )
    finally:
        close_all(col)
        if ref_rt is not None and not any(a.runtime is ref_rt for a in col.artifacts):
            ref_rt.close()
    report.device = device
    fallback = [n for n in notes if n.startswith("could not rebuild the source")]
    if fallback:  # said in the first line of the table too: a reference the user did not expect changes every verdict
        report.reference["instead_of_source"] = (
            fallback[0].removeprefix("could not rebuild the source (").rsplit(")", 1)[0]
        )
    report.notes = notes + col.notes + report.notes
    return report


def _field(col: Collection, name: str) -> Mapping[str, Any]:
    return {a.key: getattr(a, name) for a in col.artifacts}
