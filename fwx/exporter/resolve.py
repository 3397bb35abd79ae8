"""Pin the signature of a loaded source: flags first, then the model's own, checked on a sample.

An ``--input`` that does not fit is caught here, before any export work, with
one line naming the input (the model is run once on a sample built from the
pinned specs; PyTorch has no other way to tell).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from fwx.converters import _torch as tc
from fwx.errors import FwxError, InputError, first_line
from fwx.exporter.pinning import check_against_model, output_specs, resolve_inputs
from fwx.exporter.probe_outputs import resolve_outputs, settle
from fwx.formats import Format
from fwx.quiet import quiet
from fwx.signature import Signature, TensorSpec, names_or_default
from fwx.sources.load import LoadedSource
from fwx.sources.samples import InputConfig, make_feeds, probe_sizes, size_plans
from fwx.sources.tf_source import time_distributed_over_dynamic_time

_TORCH_NEEDS = "a PyTorch model stores no input signature: fwx needs the inputs' names, dtypes and shapes"


def pin_signature(
    src: LoadedSource,
    inputs: Sequence[TensorSpec] = (),
    outputs: Sequence[str] = (),
    examples: Mapping[str, np.ndarray] | None = None,
    cfg: InputConfig | None = None,
) -> Signature:
    """The pinned signature; ``cfg`` carries ``--input-range``/``--input-values`` for the probing samples."""
    if src.plan_format is Format.PYTORCH:
        return _pin_torch(src, inputs, outputs, examples, cfg)
    pinned_in = resolve_inputs(inputs, examples, src.inputs)
    model_in = src.inputs or ()
    if model_in:
        flag = "--example-inputs" if examples and not inputs else "--input"
        check_against_model(pinned_in, model_in, rename_ok=src.format is Format.KERAS, flag=flag)
    model_out = src.outputs or ()
    if src.format is Format.KERAS:
        _probe_keras(src, pinned_in, examples, cfg, given=bool(inputs))
        names = names_or_default(outputs, len(model_out), "output") if outputs else [s.name for s in model_out]
        if len(names) != len(model_out):
            raise InputError(
                f"--output names {len(names)} output(s) but the model has {len(model_out)}",
                hint="pass one --output per model output, or none",
            )
        outs = tuple(TensorSpec(n, s.dtype, s.shape) for n, s in zip(names, model_out, strict=True))
        return Signature(pinned_in, _fixed_keras_outputs(src, pinned_in, outs, examples, cfg))
    if outputs and sorted(outputs) != sorted(s.name for s in model_out):
        raise InputError(
            f"--output {', '.join(outputs)} does not match the model's outputs "
            f"({', '.join(s.name for s in model_out)})",
            hint=f"{src.format} keeps its own output names",
        )
    if src.format is Format.ONNX and src.path is not None and not examples:
        _fit_onnx_images(src, pinned_in, model_out, cfg)
    return Signature(pinned_in, resolve_outputs(src, pinned_in, model_out, examples, cfg))


def _pin_torch(
    src: LoadedSource,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[str],
    examples: Mapping[str, np.ndarray] | None,
    cfg: InputConfig | None = None,
) -> Signature:
    from fwx.runtimes._torch import flatten_outputs, to_numpy  # imports torch

    specs = resolve_inputs(inputs, examples, src.inputs, needs_flags=_TORCH_NEEDS)
    arity = tc.forward_arity(src.obj)
    if arity and not arity[0] <= len(specs) <= arity[1]:
        want = arity[0] if arity[0] == arity[1] else f"{arity[0]}..{arity[1]}"
        raise InputError(
            f"the model's forward takes {want} input(s), but {len(specs)} were pinned "
            f"({', '.join(s.name for s in specs)})",
            hint="pass one --input per forward argument, in order",
        )
    sig_in = Signature(specs)
    if not examples:
        fit_image_sizes(src, specs, lambda feeds: tc.run(src.obj, feeds, sig_in), cfg)
    sizes = probe_sizes(specs, examples, src.sizes)
    runs, keys = [], None
    for i, size in enumerate(sizes):
        feeds = make_feeds(specs, size, examples, seed=i, cfg=cfg)
        try:
            with quiet():
                raw = tc.run(src.obj, feeds, sig_in)
        except Exception as exc:  # noqa: BLE001 - the model rejects the pinned inputs
            if isinstance(exc, FwxError):
                raise
            shown = ", ".join(f"{s}" for s in specs)
            what = f"--input {shown}" if inputs else f"the signature read from the model ({shown})"
            # a guard fwx's sizes do not meet (an --input outside the program's Dim range, or an axis that
            # mixes several Dims, which LoadedSource.sizes leaves alone): say what the user can pin instead
            guard = "Guard failed" in str(exc)
            raise InputError(
                f"{what} does not fit the model: it fails on a sample of shape {_shapes(feeds)}: {first_line(exc)}",
                hint="the program admits only some sizes of that dim (a Dim range or a multiple): pin one it "
                "admits with --input, e.g. a fixed length"
                if guard
                else "check the rank, sizes and dtype of each --input",
            ) from exc
        tensors, keys = flatten_outputs(raw)
        runs.append([to_numpy(t) for t in tensors])
    names = list(outputs) or keys or names_or_default((), len(runs[0]), "output")
    return Signature(specs, output_specs(names, runs, sizes))


def _refuse_dynamic_time_distributed(model: Any, specs: Sequence[TensorSpec]) -> None:
    """Every traced artifact of a dynamic-time ``TimeDistributed`` has the wrong length (Keras 3 maps it over
    the batch: ``time_distributed_over_dynamic_time``) and validation would fail every target; say why up
    front."""
    if not any(axis > 0 for s in specs for axis in s.dynamic_axes):
        return
    name = time_distributed_over_dynamic_time(model)
    if name is not None:
        raise InputError(
            f"Keras TimeDistributed layer {name!r} cannot be exported with a dynamic time axis: "
            "Keras 3 traces it over the batch size instead of the time steps, so every artifact "
            "would have the wrong length",
            hint="drop the wrapper and call the inner layer on the sequence: Dense and Conv1D already act "
            "on each time step, with the same weights",
        )


#: Sizes of an image's dynamic height and width to retry at when fwx's small ones do not fit: multiples
#: of 32, which every pooling / stride-2 pyramid of keras.applications and U-Nets divides.
_IMAGE_SIZES = (32, 64, 96)


def _probe_keras(
    src: LoadedSource,
    specs: Sequence[TensorSpec],
    examples: Mapping[str, np.ndarray] | None,
    cfg: InputConfig | None = None,
    given: bool = True,
) -> None:
    """Run the model once on a probe sample; a fully convolutional model whose dynamic height and width
    fwx's small sizes do not fit (a U-Net concatenates pooled and upsampled maps) is retried at
    multiples of 32, and the sizes that fit become ``src.sizes`` for tracing and validation."""
    _refuse_dynamic_time_distributed(src.obj, specs)
    try:
        _run_keras(src, specs, probe_sizes(specs, examples)[0], examples, cfg)
        return
    except Exception as exc:  # noqa: BLE001
        spatial = [] if examples else _image_symbols(specs)
        sizes = {sym: (_IMAGE_SIZES[i % 2], _IMAGE_SIZES[i % 2 + 1]) for i, sym in enumerate(spatial)}
        if sizes:
            with contextlib.suppress(Exception):
                for size in probe_sizes(specs, None, sizes):
                    _run_keras(src, specs, size, None, cfg)
                src.sizes = {**src.sizes, **sizes}
                return
        shown = ", ".join(str(s) for s in specs)
        raise InputError(
            f"{f'--input {shown}' if given else f'the signature read from the model ({shown})'} does not fit "
            f"the model: {first_line(exc)}",
            hint="pin sizes the model admits with --input, e.g. a fixed height and width"
            if spatial
            else "check the rank, sizes and dtype of each --input",
        ) from exc


def _run_keras(
    src: LoadedSource,
    specs: Sequence[TensorSpec],
    sizes: Mapping[str, int],
    examples: Mapping[str, np.ndarray] | None,
    cfg: InputConfig | None,
) -> None:
    feeds = make_feeds(specs, sizes, examples, cfg=cfg)
    with quiet():
        src.obj([feeds[s.name] for s in specs] if len(specs) > 1 else feeds[specs[0].name], training=False)


def _image_symbols(specs: Sequence[TensorSpec]) -> list[str]:
    """The dynamic height/width symbols of rank-4 float inputs (NHWC or NCHW), in order."""
    out: list[str] = []
    for s in specs:
        if s.rank == 4 and s.dtype.startswith("float"):
            hw = s.shape[1:3] if isinstance(s.shape[3], int) else s.shape[2:4]
            out += [d for d in hw if isinstance(d, str) and d not in out]
    return out


#: Height/width sizes tried, smallest first, when fwx's own (2-12 px) do not fit a dynamic image: a ConvNeXt's
#: stride-4 stem and three stride-2 downsamplings need 32, a Swin's windows more.
IMAGE_LADDER = (32, 64, 224)


def fit_image_sizes(
    src: LoadedSource,
    specs: Sequence[TensorSpec],
    run: Callable[[Mapping[str, np.ndarray]], Any],
    cfg: InputConfig | None = None,
) -> None:
    """Sizes of a dynamic image height and width the model can run, found before anything is converted.

    fwx traces at 2-5 px and validates at 8 and 12 px; a model that cannot run there (a pyramid of strided
    convolutions) would fail only at validation, after every conversion. Each size of the ladder is tried
    (two sizes per symbol: the ladder's and one 32 px larger per symbol, so height and width differ), the
    first the model runs at becomes ``src.sizes``; none: one line that says so, before any work.
    """
    spatial = [s for s in _image_symbols(specs) if s not in src.sizes]
    if not spatial:
        return
    first = _run_sizes(
        specs,
        run,
        cfg,
        [*probe_sizes(specs, None, src.sizes), *size_plans(Signature(tuple(specs)), InputConfig(sizes=src.sizes))],
    )
    if first is None:
        return
    for size in IMAGE_LADDER:
        sizes = {sym: (size, size + 32 * (i + 1)) for i, sym in enumerate(spatial)}
        admitted = {**src.sizes, **sizes}
        if _run_sizes(specs, run, cfg, probe_sizes(specs, None, admitted)) is None:
            src.sizes = admitted
            return
    shown = ", ".join(str(s) for s in specs)
    raise InputError(
        f"the model runs at none of the image sizes fwx tried ({shown} at 2-12 px and "
        f"{', '.join(map(str, IMAGE_LADDER))} px): {first_line(first)}",
        hint="pin a height and width the model admits with --input, e.g. [N,3,224,224]",
    ) from first


def _run_sizes(
    specs: Sequence[TensorSpec],
    run: Callable[[Mapping[str, np.ndarray]], Any],
    cfg: InputConfig | None,
    plans: Sequence[Mapping[str, int]],
) -> Exception | None:
    """The first failure of ``run`` over the size plans (symbols missing from a plan take 2), or None."""
    for plan in plans:
        try:
            with quiet():
                run(make_feeds(specs, plan, cfg=cfg))
        except Exception as exc:  # noqa: BLE001 - the model (or its runtime: an InputError) refused this size
            return exc
    return None


def _fit_onnx_images(
    src: LoadedSource, specs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], cfg: InputConfig | None
) -> None:
    from fwx.runtimes.base import load_runtime

    if not _image_symbols(specs) or src.path is None:
        return
    with quiet(native=True):
        rt = load_runtime(Format.ONNX, src.path, signature_hint=Signature(tuple(specs), tuple(outputs)))
    try:
        fit_image_sizes(src, specs, lambda feeds: rt.infer(dict(feeds)), cfg)
    finally:
        rt.close()


def _fixed_keras_outputs(
    src: LoadedSource,
    specs: tuple[TensorSpec, ...],
    outs: tuple[TensorSpec, ...],
    examples: Mapping[str, np.ndarray] | None,
    cfg: InputConfig | None,
) -> tuple[TensorSpec, ...]:
    """The model's outputs with each axis it declares dynamic but that the pinned inputs fix (a sequence
    model pinned at ``[N,50,8]``) set to its size, settled by two runs as an ONNX source's are (``settle``).

    Only when the pinned inputs fix an axis the model leaves dynamic, so an export that pins nothing has
    the signature it always had.
    """
    own = sum(len(s.dynamic_axes) for s in src.inputs or ())
    if own <= sum(len(s.dynamic_axes) for s in specs) or not any(axis > 0 for o in outs for axis in o.dynamic_axes):
        return outs
    from fwx.runtimes.eager_keras import KerasRuntime

    sizes = probe_sizes(specs, examples, src.sizes)
    rt = KerasRuntime.from_model(src.obj, Signature(specs, outs))
    try:
        with quiet():
            runs = [rt.infer(make_feeds(specs, size, examples, seed=i, cfg=cfg)) for i, size in enumerate(sizes)]
    except Exception:  # noqa: BLE001 - the model ran in _probe_keras; a failure here leaves validation to judge
        return outs
    finally:
        rt.close()
    return tuple(settle(o, runs[0].get(o.name), runs[-1].get(o.name), sizes) for o in outs)


def _shapes(feeds: Mapping[str, np.ndarray]) -> str:
    return ", ".join(f"{k}{list(v.shape)}:{v.dtype}" for k, v in feeds.items())
