"""Signature pinning: turn flags, example inputs and model defaults into one ``Signature``.

The pinned signature is the contract every artifact is checked against on
read-back. Dynamic dimensions are symbols; the batch axis of every tensor is
called ``N`` so artifacts of all formats agree on its name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from fwx.errors import InputError, UsageError
from fwx.formats import NCHW, NHWC
from fwx.signature import BATCH, Dim, Signature, TensorSpec, is_dynamic, normalize_dtype


def load_example_inputs(path: str | Path) -> dict[str, np.ndarray]:
    """Read ``--example-inputs``: an ``.npz`` whose keys are the input names, in order."""
    p = Path(path)
    if not p.is_file():
        what = "is not a file" if p.exists() else "does not exist"  # a folder or /dev/zero exists
        raise InputError(f"--example-inputs {p} {what}", hint="pass an .npz file whose keys are the input names")
    try:
        with np.load(p, allow_pickle=False) as data:
            arrays = {k: np.asarray(data[k]) for k in data.files}
    except (OSError, ValueError) as exc:
        raise InputError(
            f"--example-inputs {p} is not a readable .npz: {exc}",
            hint="write it with numpy.savez(path, name=array, ...)",
        ) from exc
    if not arrays:
        raise InputError(f"--example-inputs {p} holds no arrays", hint="save one array per model input")
    return arrays


def signature_from_examples(arrays: Mapping[str, np.ndarray]) -> tuple[TensorSpec, ...]:
    """Inputs from example arrays: their dtype and shape, with the first axis dynamic (``N``)."""
    specs = []
    for name, arr in arrays.items():
        dims: list[Dim] = list(arr.shape)
        if dims:
            dims[0] = BATCH
        specs.append(TensorSpec(name, normalize_dtype(arr.dtype), tuple(dims)))
    return tuple(specs)


def resolve_inputs(
    user: Sequence[TensorSpec],
    examples: Mapping[str, np.ndarray] | None,
    default: Sequence[TensorSpec] | None,
    *,
    needs_flags: str | None = None,
) -> tuple[TensorSpec, ...]:
    """Pick the pinned inputs: ``--input`` first, then example arrays, then the model's own.

    ``needs_flags`` is the message used when nothing gives a signature (PyTorch).
    """
    if user:
        if examples:
            for spec in user:
                if spec.name in examples and not spec.fits(examples[spec.name].shape):
                    raise InputError(
                        f"--input {spec} does not fit --example-inputs array {spec.name!r} of shape "
                        f"{list(examples[spec.name].shape)}",
                        hint="make the two agree",
                    )
        return tuple(user)
    if examples:
        return signature_from_examples(examples)
    if default:
        return tuple(default)
    raise UsageError(
        needs_flags or "cannot tell the model's inputs",
        hint="pass --input NAME:DTYPE[DIMS] (e.g. image:float32[N,3,32,32]) or --example-inputs file.npz",
    )


def check_against_model(
    pinned: Sequence[TensorSpec], model: Sequence[TensorSpec], *, rename_ok: bool, flag: str = "--input"
) -> None:
    """Refuse ``--input`` specs that cannot fit a model whose signature is known (Keras, SavedModel, ONNX).

    With ``rename_ok`` (Keras: fwx writes new endpoints) names may differ; otherwise
    they must match the model's (SavedModel/ONNX keep theirs). ``flag`` names where the specs came from.
    """
    if len(pinned) != len(model):
        want = ", ".join(str(s) for s in model)
        raise InputError(
            f"{flag} gives {len(pinned)} input(s) but the model takes {len(model)}: {want}",
            hint=f"pass one {'array' if flag == '--example-inputs' else '--input'} per model input, in order",
        )
    by_name = {s.name: s for s in model}
    for i, spec in enumerate(pinned):
        ref = model[i] if rename_ok else by_name.get(spec.name)
        if ref is None:
            raise InputError(
                f"{flag} {spec.name!r} is not an input of the model (it has {', '.join(by_name)})",
                hint="use the model's input names",
            )
        problem = _misfit(spec, ref)
        if problem:
            raise InputError(
                f"{flag} {spec} does not fit the model's input {ref}: {problem}",
                hint="match the model's rank, fixed sizes and dtype",
            )


def _misfit(spec: TensorSpec, ref: TensorSpec) -> str | None:
    if spec.rank != ref.rank:
        return f"rank {spec.rank} vs {ref.rank}"
    if spec.dtype != ref.dtype:
        return f"dtype {spec.dtype} vs {ref.dtype}"
    for axis, (mine, theirs) in enumerate(zip(spec.shape, ref.shape, strict=True)):
        if not is_dynamic(theirs) and (is_dynamic(mine) or mine != theirs):
            return f"axis {axis} is fixed to {theirs} in the model"
    return None


def output_specs(
    names: Sequence[str], runs: Sequence[Sequence[np.ndarray]], sizes: Sequence[Mapping[str, int]]
) -> tuple[TensorSpec, ...]:
    """Output specs from running the model at the two ``probe_sizes``.

    A dimension that changes between runs is dynamic; it takes the input symbol
    whose size it equals in both runs (``N`` for a batch axis), else the sum of two
    that it equals in both (a decoder's cache: ``past_decoder_sequence_length +
    decoder_sequence_length``), else a new symbol.
    """
    first, second = runs
    if len(first) != len(names):
        raise UsageError(
            f"--output names {len(names)} output(s) but the model returns {len(first)}",
            hint="pass one --output per model output, or none",
        )
    specs = []
    for name, a, b in zip(names, first, second, strict=True):
        dims: list[Dim] = []
        for axis, (da, db) in enumerate(zip(a.shape, b.shape, strict=False)):
            if da == db:
                dims.append(int(da))
                continue
            match = [sym for sym in sizes[0] if sizes[0][sym] == da and sizes[1].get(sym) == db]
            match += [
                f"{p} + {q}"
                for q in sizes[0]
                for p in sizes[0]
                if p > q and sizes[0][p] + sizes[0][q] == da and sizes[1].get(p, -1) + sizes[1].get(q, -1) == db
            ]
            dims.append(match[0] if match else f"{name}_d{axis}")
        specs.append(TensorSpec(name, normalize_dtype(a.dtype), tuple(dims)))
    return tuple(specs)


def guess_layout(sig: Signature, framework: str) -> str | None:
    """The spatial layout of a rank-4 image input: torch is channels-first, Keras/TF channels-last."""
    rank4 = [s for s in sig.inputs if s.rank == 4]
    if not rank4:
        return None
    shape = rank4[0].shape
    if framework in ("torch", "pytorch"):
        return NCHW
    if framework in ("keras", "tensorflow"):
        return NHWC
    if shape[1] in (1, 3, 4) and shape[3] not in (1, 3, 4):
        return NCHW
    if shape[3] in (1, 3, 4):
        return NHWC
    return None
