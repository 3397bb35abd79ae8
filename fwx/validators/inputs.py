"""Validation inputs from user data (``--data``); generated ones come from ``fwx.sources.samples``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from fwx.errors import InputError, first_line
from fwx.signature import Signature


def check_fits(sig: Signature, samples: Sequence[Mapping[str, np.ndarray]], flag: str = "--data") -> None:
    """Raise one ``InputError`` line when user data (given with ``flag``) does not fit the signature."""
    for i, sample in enumerate(samples):
        missing = [n for n in sig.input_names if n not in sample]
        if missing:
            raise InputError(f"{flag} sample {i} lacks input(s) {', '.join(missing)}", hint=f"the signature is {sig}")
        for spec in sig.inputs:
            arr = sample[spec.name]
            if not spec.fits(arr.shape):
                raise InputError(
                    f"{flag} {spec.name!r} has shape {list(arr.shape)}, the signature says {list(spec.shape)}",
                    hint="pass arrays that fit the pinned signature",
                )
            if (
                spec.dtype != "bytes"
                and np.dtype(spec.dtype).kind != arr.dtype.kind
                and not (np.dtype(spec.dtype).kind in "iu" and arr.dtype.kind in "iu")
            ):
                raise InputError(
                    f"{flag} {spec.name!r} is {arr.dtype}, the signature says {spec.dtype}",
                    hint="save the arrays with the signature's dtype",
                )


def load_data(
    path: str | Path, sig: Signature, *, samples: int | None = None, flag: str = "--data"
) -> list[dict[str, np.ndarray]]:
    """Samples from a ``.npz`` or a folder of ``<input>.npy`` files (``flag``: the option that named it).

    Each array holds a batch; a batch larger than one is kept as one sample so
    its shape is exercised as given. ``samples`` caps the number of rows used.
    """
    p = Path(path)
    arrays: dict[str, np.ndarray] = {}
    try:
        if p.is_dir():
            arrays = {f.stem: np.load(f, allow_pickle=False) for f in sorted(p.glob("*.npy"))}
        elif p.suffix == ".npz":
            with np.load(p, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        elif p.suffix == ".npy" and len(sig.inputs) == 1:
            arrays = {sig.inputs[0].name: np.load(p, allow_pickle=False)}
        else:
            raise InputError(
                f"{flag} {p} is neither a .npz file nor a folder of .npy files",
                hint="save with np.savez(path, **{input_name: array})",
            )
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {flag} {p}: {first_line(exc)}") from exc
    if not arrays:
        raise InputError(f"{flag} {p} holds no arrays", hint="save with np.savez(path, **{input_name: array})")
    if samples is not None:
        arrays = {k: v[:samples] if v.ndim else v for k, v in arrays.items()}
    sample = {n: arrays[n] for n in sig.input_names if n in arrays}
    extra = sorted(set(arrays) - set(sig.input_names) - {"labels"})
    if extra:
        raise InputError(
            f"{flag} holds array(s) {', '.join(extra)} that the model does not take",
            hint=f"inputs are: {', '.join(sig.input_names)} (plus optional 'labels')",
        )
    check_fits(sig, [sample], flag)
    return [sample]


def load_labels(path: str | Path, samples: int | None = None) -> np.ndarray | None:
    """The optional ``labels`` array stored beside the inputs in ``--data``."""
    p = Path(path)
    if p.is_dir() and (p / "labels.npy").is_file():
        labels = np.load(p / "labels.npy", allow_pickle=False)
    elif p.suffix == ".npz":
        with np.load(p, allow_pickle=False) as z:
            labels = z["labels"] if "labels" in z.files else None
    else:
        labels = None
    if labels is not None and samples is not None:
        labels = labels[:samples]
    return labels
