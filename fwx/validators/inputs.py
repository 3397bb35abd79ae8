"""Sample inputs for validation: generated from the pinned signature, or loaded from user data.

Generated samples use a fixed seed and dtype-aware ranges, and exercise every
dynamic dimension at two sizes (batch 1 and 3; other dims 8 and 12 by default)
so an artifact that silently pinned a dimension fails on the second size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fwx.errors import InputError, UsageError, first_line
from fwx.signature import Signature, TensorSpec, is_dynamic

BATCH_SIZES = (1, 3)
DIM_SIZES = (8, 12)


@dataclass(frozen=True)
class InputConfig:
    """How to draw inputs. ``int_range`` is [lo, hi) for every integer input (token ids);
    without it signed ints draw from [0, 10) and uint8 from 0..255."""

    seed: int = 0
    samples: int = 4
    int_range: tuple[int, int] | None = None
    float_dist: str = "normal"  # "normal" (standard normal) or "uniform" ([0, 1))
    batch_sizes: tuple[int, ...] = BATCH_SIZES
    dim_sizes: tuple[int, ...] = DIM_SIZES
    sizes: Mapping[str, Sequence[int]] = field(default_factory=dict)  # per-symbol override

    def __post_init__(self) -> None:
        if self.float_dist not in ("normal", "uniform"):
            raise UsageError(f"unknown float distribution {self.float_dist!r}", hint="use normal or uniform")
        if self.int_range is not None and self.int_range[1] <= self.int_range[0]:
            raise UsageError(f"integer range {self.int_range} is empty", hint="give LO,HI with HI > LO ([LO, HI))")


def _symbol(spec: TensorSpec, axis: int) -> str:
    d = spec.shape[axis]
    if isinstance(d, str):
        return d
    return "__batch__" if axis == 0 else f"{spec.name}:{axis}"


def dynamic_symbols(sig: Signature) -> dict[str, bool]:
    """Every dynamic symbol of the inputs -> whether it sits on a batch (leading) axis."""
    out: dict[str, bool] = {}
    for spec in sig.inputs:
        for axis in spec.dynamic_axes:
            sym = _symbol(spec, axis)
            out[sym] = out.get(sym, False) or axis == 0
    return out


def size_plans(sig: Signature, cfg: InputConfig) -> list[dict[str, int]]:
    """One concrete size per symbol per plan; plan ``i`` takes the ``i``-th size of every symbol."""
    symbols = dynamic_symbols(sig)
    if not symbols:
        return [{}]
    choices = {s: tuple(cfg.sizes.get(s) or (cfg.batch_sizes if batch else cfg.dim_sizes))
               for s, batch in symbols.items()}
    n = max(len(c) for c in choices.values())
    return [{s: c[i % len(c)] for s, c in choices.items()} for i in range(n)]


def _draw(spec: TensorSpec, shape: tuple[int, ...], rng: np.random.Generator, cfg: InputConfig) -> np.ndarray:
    dt = np.dtype(object) if spec.dtype == "bytes" else np.dtype(spec.dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt.name)
        lo, hi = cfg.int_range or ((0, 256) if dt.kind == "u" and info.bits == 8 else (0, 10))
        lo, hi = max(lo, int(info.min)), min(hi, int(info.max) + 1)
        return rng.integers(lo, hi, size=shape).astype(dt)
    if dt.kind == "f" or spec.dtype == "bfloat16":
        x = rng.standard_normal(shape) if cfg.float_dist == "normal" else rng.random(shape)
        return x.astype(np.float32 if spec.dtype == "bfloat16" else dt)
    if dt.kind == "O":
        return np.array([f"sample {i}".encode() for i in range(int(np.prod(shape)))], dtype=object).reshape(shape)
    raise InputError(f"cannot generate inputs of dtype {spec.dtype} for {spec.name!r}", hint="pass --data")


def generate_inputs(sig: Signature, cfg: InputConfig | None = None) -> list[dict[str, np.ndarray]]:
    """``cfg.samples`` samples (at least one per size plan), cycling through the size plans."""
    cfg = cfg or InputConfig()
    rng = np.random.default_rng(cfg.seed)
    plans = size_plans(sig, cfg)
    samples = []
    for i in range(max(cfg.samples, len(plans))):
        plan = plans[i % len(plans)]
        sample = {}
        for spec in sig.inputs:
            shape = tuple(plan[_symbol(spec, a)] if is_dynamic(d) else int(d) for a, d in enumerate(spec.shape))
            sample[spec.name] = _draw(spec, shape, rng, cfg)
        samples.append(sample)
    return samples


def check_fits(sig: Signature, samples: Sequence[Mapping[str, np.ndarray]]) -> None:
    """Raise one ``InputError`` line when user data does not fit the signature."""
    for i, sample in enumerate(samples):
        missing = [n for n in sig.input_names if n not in sample]
        if missing:
            raise InputError(f"--data sample {i} lacks input(s) {', '.join(missing)}",
                             hint=f"the signature is {sig}")
        for spec in sig.inputs:
            arr = sample[spec.name]
            if not spec.fits(arr.shape):
                raise InputError(f"--data {spec.name!r} has shape {list(arr.shape)}, the signature says {list(spec.shape)}",
                                 hint="pass arrays that fit the pinned signature")
            if spec.dtype != "bytes" and np.dtype(spec.dtype).kind != arr.dtype.kind and \
                    not (np.dtype(spec.dtype).kind in "iu" and arr.dtype.kind in "iu"):
                raise InputError(f"--data {spec.name!r} is {arr.dtype}, the signature says {spec.dtype}",
                                 hint="save the arrays with the signature's dtype")


def load_data(path: str | Path, sig: Signature, *, samples: int | None = None) -> list[dict[str, np.ndarray]]:
    """Samples from a ``.npz`` or a folder of ``<input>.npy`` files.

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
            raise InputError(f"--data {p} is neither a .npz file nor a folder of .npy files",
                             hint="save with np.savez(path, **{input_name: array})")
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read --data {p}: {first_line(exc)}") from exc
    if not arrays:
        raise InputError(f"--data {p} holds no arrays", hint="save with np.savez(path, **{input_name: array})")
    if samples is not None:
        arrays = {k: v[:samples] if v.ndim else v for k, v in arrays.items()}
    sample = {n: arrays[n] for n in sig.input_names if n in arrays}
    extra = sorted(set(arrays) - set(sig.input_names) - {"labels"})
    if extra:
        raise InputError(f"--data holds array(s) {', '.join(extra)} that the model does not take",
                         hint=f"inputs are: {', '.join(sig.input_names)} (plus optional 'labels')")
    check_fits(sig, [sample])
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
