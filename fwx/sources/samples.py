"""The one sample generator: concrete inputs for a signature, for tracing, probing and validation.

The exporter traces and probes with ``make_feeds`` at ``probe_sizes`` (two
size sets, all different, none 0 or 1); the validators draw
``generate_inputs`` (fixed seed, every dynamic dimension at two sizes: batch
1 and 3, other dims 8 and 12 by default) so an artifact that silently pinned a
dimension fails on the second size. Both draw each tensor through ``draw``,
which samples integers by what they are: a mask (an input the model uses as
one, ``fwx.sources.input_roles``; by its name ``*mask*`` where the model could
not be followed) is 1s with padding at the end of rows, ``--input-range``/
``--input-values`` (and the table an input indexes) bound the others;
and no array is allocated before its size is checked against
``MAX_SAMPLE_BYTES``: a model declaring a 2**40 axis gets one line naming the
input instead of a ``MemoryError``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fwx.errors import InputError, UsageError
from fwx.signature import Signature, TensorSpec, is_dynamic

BATCH_SIZES = (1, 3)
DIM_SIZES = (8, 12)
#: The largest single sample tensor fwx will allocate (bytes).
MAX_SAMPLE_BYTES = 1 << 30
#: Tracing samples draw integers from [0, 2): valid indices for any non-empty embedding.
TRACE_INT_RANGE = (0, 2)


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
    ranges: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # per-input [lo, hi) (``--input-range``)
    # per-input choices (``--input-values``; a lookup table's keys, bytes for strings)
    values: Mapping[str, tuple[float | int | bytes, ...]] = field(default_factory=dict)
    masks: frozenset[str] | None = None  # inputs read as masks from the model; None: by name (``is_mask``)
    notes: Mapping[str, str] = field(default_factory=dict)  # per input: how its samples are drawn, and why
    data: tuple[Mapping[str, np.ndarray], ...] = ()  # real samples added to the drawn ones (--validation-data)

    def masked(self, name: str) -> bool:
        """Whether input ``name`` is drawn as a mask: as the model showed where it was followed, else by name."""
        return name in self.masks if self.masks is not None else is_mask(name)

    def __post_init__(self) -> None:
        if self.float_dist not in ("normal", "uniform"):
            raise UsageError(f"unknown float distribution {self.float_dist!r}", hint="use normal or uniform")
        for lo, hi in [*([self.int_range] if self.int_range else []), *self.ranges.values()]:
            if hi <= lo:
                raise UsageError(f"integer range {lo},{hi} is empty", hint="give LO,HI with HI > LO ([LO, HI))")


#: At most this many choices per input are recorded in fwx.json (a lookup's are capped at 258 already).
MAX_RECORDED_VALUES = 1024


def hints_to_json(cfg: InputConfig) -> dict[str, Any]:
    """The per-input sampling hints of an export (``fwx.json`` ``samples``), so ``fwx validate`` draws
    what the export drew: ids within the embedding, a lookup table's keys, the sizes a ``.pt2``'s
    ``Dim`` ranges admit. Empty when there are none.

    Bytes choices are written as UTF-8 text; an input with a key that is not UTF-8 is left out
    (validation then draws generic strings for it, as it would without a manifest).
    """
    out: dict[str, Any] = {}
    if cfg.ranges:
        out["input_ranges"] = {name: [int(lo), int(hi)] for name, (lo, hi) in cfg.ranges.items()}
    values: dict[str, list[Any]] = {}
    for name, choices in cfg.values.items():
        try:
            values[name] = [c.decode() if isinstance(c, bytes) else c for c in list(choices)[:MAX_RECORDED_VALUES]]
        except UnicodeDecodeError:
            continue
    if values:
        out["input_values"] = values
    if cfg.sizes:
        out["sizes"] = {sym: [int(n) for n in choices] for sym, choices in cfg.sizes.items()}
    if cfg.masks is not None:
        out["masks"] = sorted(cfg.masks)
    if cfg.notes:
        out["notes"] = dict(cfg.notes)
    return out


def hints_from_json(data: Mapping[str, Any], sig: Signature) -> InputConfig:
    """``hints_to_json``'s output back as an ``InputConfig`` (ranges, values, sizes) for ``sig``'s inputs;
    names the signature does not have are dropped (a manifest is data, not a command line)."""
    specs = {s.name: s for s in sig.inputs}
    ranges = {
        n: (int(r[0]), int(r[1]))
        for n, r in (data.get("input_ranges") or {}).items()
        if n in specs and int(r[1]) > int(r[0])
    }
    values: dict[str, tuple[Any, ...]] = {}
    for n, choices in (data.get("input_values") or {}).items():
        if n in specs and choices:
            strings = specs[n].dtype == "bytes"
            values[n] = tuple(c.encode() if strings and isinstance(c, str) else c for c in choices)
    symbols = dynamic_symbols(sig)
    sizes = {
        sym: tuple(int(n) for n in choices)
        for sym, choices in (data.get("sizes") or {}).items()
        if sym in symbols and choices and all(int(n) >= 0 for n in choices)  # 0: an empty cache
    }
    masks = data.get("masks")
    notes = {n: str(t) for n, t in (data.get("notes") or {}).items() if n in specs}
    return InputConfig(
        ranges=ranges,
        values=values,
        sizes=sizes,
        masks=frozenset(str(n) for n in masks if n in specs) if isinstance(masks, list) else None,
        notes=notes,
    )


def is_mask(name: str) -> bool:
    """An input that masks positions (``attention_mask``, ``padding_mask``): 1 = attend, 0 = padding."""
    return "mask" in name.lower()


def is_offsets(spec: TensorSpec) -> bool:
    """Where each bag starts in a flat id list (``nn.EmbeddingBag(ids, offsets)``): a 1-D integer input
    named like ``*offsets*``. Random integers are not offsets (``offsets[0] has to be 0``)."""
    return spec.rank == 1 and "offset" in spec.name.lower() and spec.dtype.startswith(("int", "uint"))


def _bag_offsets(
    feeds: dict[str, np.ndarray], specs: Sequence[TensorSpec], rng: np.random.Generator, given: Iterable[str]
) -> None:
    """Redraw offsets inputs, in place, as bag starts into the first other 1-D integer input: 0, then
    sorted positions up to its length (an empty bag is allowed, as torch allows it). Inputs in ``given``
    (the user's values or examples) are left as they are."""
    flat = [s.name for s in specs if s.rank == 1 and s.dtype.startswith(("int", "uint")) and not is_offsets(s)]
    if not flat:
        return
    n, keep = int(feeds[flat[0]].shape[0]), set(given)
    for spec in specs:
        if is_offsets(spec) and spec.name not in keep:
            count = int(feeds[spec.name].shape[0])
            starts = np.sort(rng.integers(0, n + 1, max(count - 1, 0)))
            feeds[spec.name] = np.concatenate([[0], starts])[:count].astype(feeds[spec.name].dtype)


def _mask(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """1s with padding (0s) at the end of each row along the last axis; the first row and every row keep
    at least one 1, so no row attends to nothing (such rows legitimately differ between runtimes)."""
    out = np.ones(shape, dtype=np.int64)
    if not shape or shape[-1] < 2:
        return out
    rows = out.reshape(-1, shape[-1])
    for r in range(1, rows.shape[0]):
        pad = int(rng.integers(0, shape[-1] // 2 + 1))
        if pad:
            rows[r, -pad:] = 0
    return out


def parse_input_range(text: str) -> tuple[str, tuple[int, int]]:
    """``NAME:LO,HI`` (``--input-range``) -> (name, (lo, hi)), integers drawn from [lo, hi)."""
    name, _, rest = text.rpartition(":")
    parts = rest.split(",")
    try:
        lo, hi = (int(p) for p in parts) if len(parts) == 2 else (0, -1)
    except ValueError:
        lo, hi = 0, -1
    if not name or hi <= lo:
        raise UsageError(
            f"--input-range {text!r} is not NAME:LO,HI with integers LO < HI",
            hint="e.g. --input-range input_ids:0,30522 (values drawn from [LO, HI))",
        )
    return name, (lo, hi)


def parse_input_values(text: str) -> tuple[str, tuple[float, ...]]:
    """``NAME:V1,V2,...`` (``--input-values``) -> (name, values), each sample element one of them."""
    name, _, rest = text.rpartition(":")
    try:
        values = tuple(float(v) for v in rest.split(",") if v.strip())
    except ValueError:
        values = ()
    if not name or not values:
        raise UsageError(
            f"--input-values {text!r} is not NAME:V1,V2,...", hint="e.g. --input-values token_type_ids:0,1"
        )
    return name, values


def check_names(cfg: InputConfig, sig: Signature) -> None:
    """Refuse ``--input-range`` / ``--input-values`` for a name the signature does not have."""
    for flag, names in (("--input-range", cfg.ranges), ("--input-values", cfg.values)):
        unknown = [n for n in names if n not in sig.input_names]
        if unknown:
            raise UsageError(
                f"{flag} names {', '.join(unknown)}, not an input of the model",
                hint=f"inputs are: {', '.join(sig.input_names)}",
            )


def check_size(spec: TensorSpec, shape: Sequence[int]) -> None:
    """Refuse a sample of ``shape`` for ``spec`` that would not fit in memory, before allocating it."""
    itemsize = 8 if spec.dtype in ("bytes", "bfloat16") else np.dtype(spec.dtype).itemsize
    count = 1
    for n in shape:
        count *= max(int(n), 0)
    if count * itemsize > MAX_SAMPLE_BYTES:
        raise InputError(
            f"input {spec.name!r}: a sample of shape {list(shape)} would take "
            f"{count * itemsize / 2**30:.3g} GiB (limit {MAX_SAMPLE_BYTES // 2**30} GiB)",
            hint=f"pin smaller sizes with --input {spec.name}:{spec.dtype}[...] or pass --example-inputs",
        )


def draw(spec: TensorSpec, shape: tuple[int, ...], rng: np.random.Generator, cfg: InputConfig) -> np.ndarray:
    """One random array for ``spec`` at ``shape``, dtype-aware."""
    check_size(spec, shape)
    dt = np.dtype(object) if spec.dtype == "bytes" else np.dtype(spec.dtype)
    if spec.name in cfg.values:
        choices = np.asarray(cfg.values[spec.name])
        return rng.choice(choices, size=shape).astype(np.float32 if spec.dtype == "bfloat16" else dt)
    if cfg.masked(spec.name) and len(shape) >= 2 and dt.kind in "biuf":
        return _mask(shape, rng).astype(np.float32 if spec.dtype == "bfloat16" else dt)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt.name)
        lo, hi = (
            cfg.ranges.get(spec.name) or cfg.int_range or ((0, 256) if dt.kind == "u" and info.bits == 8 else (0, 10))
        )
        lo, hi = max(lo, int(info.min)), min(hi, int(info.max) + 1)
        return rng.integers(lo, hi, size=shape).astype(dt)
    if dt.kind == "f" or spec.dtype == "bfloat16":
        x = rng.standard_normal(shape) if cfg.float_dist == "normal" else rng.random(shape)
        return x.astype(np.float32 if spec.dtype == "bfloat16" else dt)
    if dt.kind == "O":
        return np.array([f"sample {i}".encode() for i in range(int(np.prod(shape)))], dtype=object).reshape(shape)
    raise InputError(f"cannot generate inputs of dtype {spec.dtype} for {spec.name!r}", hint="pass --data")


# Validation samples: every dynamic symbol at two sizes.


def symbol_key(spec: TensorSpec, axis: int) -> str:
    """How size plans (``InputConfig.sizes``) name an input axis: its symbol, else its position."""
    d = spec.shape[axis]
    if isinstance(d, str):
        return d
    return "__batch__" if axis == 0 else f"{spec.name}:{axis}"


def dynamic_symbols(sig: Signature) -> dict[str, bool]:
    """Every dynamic symbol of the inputs -> whether it sits on a batch (leading) axis."""
    out: dict[str, bool] = {}
    for spec in sig.inputs:
        for axis in spec.dynamic_axes:
            sym = symbol_key(spec, axis)
            out[sym] = out.get(sym, False) or axis == 0
    return out


def size_plans(sig: Signature, cfg: InputConfig) -> list[dict[str, int]]:
    """One concrete size per symbol per plan; plan ``i`` takes the ``i``-th size of every symbol."""
    symbols = dynamic_symbols(sig)
    if not symbols:
        return [{}]
    choices = {
        s: tuple(cfg.sizes.get(s) or (cfg.batch_sizes if batch else cfg.dim_sizes)) for s, batch in symbols.items()
    }
    n = max(len(c) for c in choices.values())
    return [{s: c[i % len(c)] for s, c in choices.items()} for i in range(n)]


def generate_inputs(sig: Signature, cfg: InputConfig | None = None) -> list[dict[str, np.ndarray]]:
    """``cfg.samples`` samples (at least one per size plan), cycling through the size plans, then ``cfg.data``."""
    cfg = cfg or InputConfig()
    rng = np.random.default_rng(cfg.seed)
    plans = size_plans(sig, cfg)
    samples = []
    for i in range(max(cfg.samples, len(plans))):
        plan = plans[i % len(plans)]
        sample = {}
        for spec in sig.inputs:
            shape = tuple(plan[symbol_key(spec, a)] if is_dynamic(d) else int(d) for a, d in enumerate(spec.shape))
            sample[spec.name] = draw(spec, shape, rng, cfg)
        _bag_offsets(sample, sig.inputs, rng, cfg.values)
        samples.append(sample)
    return samples + [dict(d) for d in cfg.data]


# Tracing and probing samples: two size sets, examples tiled to fit.


def probe_sizes(
    specs: Sequence[TensorSpec],
    examples: Mapping[str, np.ndarray] | None = None,
    admitted: Mapping[str, Sequence[int]] | None = None,
) -> list[dict[str, int]]:
    """Two size assignments for the dynamic symbols, all sizes different, none 0 or 1.

    torch.export specialises sizes 0 and 1, and distinct sizes let output dims be
    matched to the input symbol that drives them. ``admitted`` gives the two sizes
    of a symbol the model restricts (``LoadedSource.sizes``); examples still win.
    """
    symbols: list[str] = []
    for s in specs:
        symbols += [d for d in s.shape if isinstance(d, str) and d not in symbols]
    first = {sym: 2 + i for i, sym in enumerate(symbols)}
    admitted = {s: c for s, c in (admitted or {}).items() if s in first and c}
    first.update({s: int(c[0]) for s, c in admitted.items()})
    if examples:
        for s in specs:
            if s.name in examples:
                for d, n in zip(s.shape, examples[s.name].shape, strict=False):
                    if isinstance(d, str):
                        first[d] = int(n)
    second = {
        sym: int(admitted[sym][-1]) if sym in admitted and first[sym] == admitted[sym][0] else n + len(symbols) + 1
        for sym, n in first.items()
    }
    return [first, second]


def make_feeds(
    specs: Sequence[TensorSpec],
    sizes: Mapping[str, int],
    examples: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    cfg: InputConfig | None = None,
) -> dict[str, np.ndarray]:
    """Concrete arrays for ``specs``; example arrays are tiled along dynamic axes to reach ``sizes``.

    Integers default to [0, 2) (valid ids for any embedding); ``cfg`` brings per-input ranges and values.
    """
    rng = np.random.default_rng(seed)
    cfg = replace(cfg, int_range=TRACE_INT_RANGE) if cfg is not None else InputConfig(int_range=TRACE_INT_RANGE)
    feeds: dict[str, np.ndarray] = {}
    for s in specs:
        shape = tuple(sizes.get(d, 2) if isinstance(d, str) else (2 if d == -1 else int(d)) for d in s.shape)
        if examples and s.name in examples:
            check_size(s, shape)
            feeds[s.name] = _fit_example(np.asarray(examples[s.name]), shape).astype(s.dtype)
        else:
            feeds[s.name] = draw(s, shape, rng, cfg)
    _bag_offsets(feeds, specs, rng, [*cfg.values, *(examples or {})])
    return feeds


def _fit_example(arr: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if arr.shape == shape or arr.ndim != len(shape):
        return arr
    for axis, n in enumerate(shape):
        if arr.shape[axis] != n and arr.shape[axis] > 0:
            reps = -(-n // arr.shape[axis])
            arr = np.concatenate([arr] * reps, axis=axis).take(range(n), axis=axis)
    return arr
