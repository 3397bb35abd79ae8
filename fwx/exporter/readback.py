"""Read a written artifact back and hold it to the pinned signature.

An exporter that "succeeds" but pins a dynamic batch to 1, renames an input or
writes another opset has produced a different model than asked for. Inputs must
match exactly (names, dtypes, rank, which axes are dynamic, fixed sizes);
outputs must match names and dtypes, and no pinned dynamic axis may come back
fixed (an exporter losing a static output size is tolerated).

An artifact asked for in another layout (``--layout nhwc`` of an NCHW model) is
held to the pin as that layout shows it: its 4-D inputs transposed (a 4-D
output may come back in either layout; the validator moves it back by shape).
With ``--static-shapes`` the pin arrives here with its dynamic dims fixed.
"""

from __future__ import annotations

from pathlib import Path

from fwx.errors import SignatureMismatchError
from fwx.formats import Format
from fwx.runtimes.files import load_onnx, onnx_opset
from fwx.signature import Signature, TensorSpec, is_dynamic
from fwx.validators.layout import shape_to


def differences(pinned: Signature, got: Signature, *, check_dtypes: bool = True) -> list[str]:
    """Every way ``got`` departs from ``pinned``, one line each (empty when it fits)."""
    problems: list[str] = []
    if got.input_names != pinned.input_names:
        problems.append(f"inputs are {got.input_names}, pinned {pinned.input_names}")
    else:
        for p, g in zip(pinned.inputs, got.inputs, strict=True):
            problems += _compare("input", p, g, strict=True, check_dtypes=check_dtypes)
    if sorted(got.output_names) != sorted(pinned.output_names):
        problems.append(f"outputs are {got.output_names}, pinned {pinned.output_names}")
    else:
        for p in pinned.outputs:
            problems += _compare("output", p, got.output(p.name), strict=False, check_dtypes=check_dtypes)
    return problems


def _compare(kind: str, p: TensorSpec, g: TensorSpec, *, strict: bool, check_dtypes: bool) -> list[str]:
    out: list[str] = []
    if check_dtypes and p.dtype != g.dtype:
        out.append(f"{kind} {p.name!r} is {g.dtype}, pinned {p.dtype}")
    if not g.shape and not strict:
        return out  # the format does not record output shapes
    if g.rank != p.rank:
        return [*out, f"{kind} {p.name!r} has rank {g.rank} ({_dims(g)}), pinned {p.rank} ({_dims(p)})"]
    for axis, (pd, gd) in enumerate(zip(p.shape, g.shape, strict=True)):
        if is_dynamic(pd) and not is_dynamic(gd):
            out.append(f"{kind} {p.name!r} axis {axis} is fixed to {gd}, pinned dynamic ({pd})")
        elif strict and not is_dynamic(pd) and is_dynamic(gd):
            out.append(f"{kind} {p.name!r} axis {axis} is dynamic, pinned {pd}")
        elif not is_dynamic(pd) and not is_dynamic(gd) and pd != gd:
            out.append(f"{kind} {p.name!r} axis {axis} is {gd}, pinned {pd}")
    return out


def shared_dims(pinned: Signature, got: Signature) -> list[str]:
    """Where the artifact's input symbols group axes differently from the pin (``.pt2`` programs guard them).

    Two input axes pinned with one symbol (the batch of ``input_ids`` and
    ``attention_mask``) must share one symbol in the artifact, and axes pinned
    apart must stay apart; an artifact that reports no symbol for an axis is not judged.
    """
    if got.input_names != pinned.input_names:
        return []
    pin_axes: dict[str, tuple[str, int]] = {}
    got_axes: dict[str, tuple[str, int]] = {}
    problems: list[str] = []
    for p, g in zip(pinned.inputs, got.inputs, strict=True):
        if p.rank != g.rank:
            continue
        for axis, (pd, gd) in enumerate(zip(p.shape, g.shape, strict=True)):
            if not (isinstance(pd, str) and isinstance(gd, str)):
                continue
            first_pin, first_got = pin_axes.setdefault(pd, (p.name, axis)), got_axes.setdefault(gd, (p.name, axis))
            if first_pin != (p.name, axis) and first_got != first_pin:
                problems.append(
                    f"input {p.name!r} axis {axis} and input {first_pin[0]!r} axis {first_pin[1]} share "
                    f"{pd} in the pin, but the artifact lets them differ"
                )
            elif first_got != (p.name, axis) and first_pin != first_got:
                problems.append(
                    f"input {p.name!r} axis {axis} must equal input {first_got[0]!r} axis "
                    f"{first_got[1]} in the artifact, but the pin lets them differ"
                )
    return problems


def baked_axes(pinned: Signature, got: Signature, layouts: tuple[str | None, str | None] = (None, None)) -> list[str]:
    """The pinned dynamic axes ``got`` declares fixed, one line each (empty when none, or when names differ).

    Judged as ``check_readback`` judges layouts: an artifact in another layout
    counts as baking only if it does under both readings of its 4-D outputs.
    """
    variants = [in_layout(pinned, *layouts)]
    if layouts[0] != layouts[1]:
        variants.append(in_layout(pinned, *layouts, outputs=True))
    return min((_fixed_axes(v, got) for v in variants), key=len)


def _fixed_axes(pinned: Signature, got: Signature) -> list[str]:
    if got.input_names != pinned.input_names or sorted(got.output_names) != sorted(pinned.output_names):
        return []
    pairs = [
        *(("input", p, g) for p, g in zip(pinned.inputs, got.inputs, strict=True)),
        *(("output", p, got.output(p.name)) for p in pinned.outputs),
    ]
    out: list[str] = []
    for kind, p, g in pairs:
        if g.rank != p.rank:
            continue
        for axis, (pd, gd) in enumerate(zip(p.shape, g.shape, strict=True)):
            if is_dynamic(pd) and not is_dynamic(gd):
                out.append(f"{kind} {p.name!r} axis {axis} is fixed to {gd}, pinned dynamic ({pd})")
    return out


def as_pinned(pinned: Signature, got: Signature, *, outputs: bool = True) -> Signature:
    """``got`` with each dynamic axis spelled as the pin spells it, so that every format of one export
    records one set of dim names in fwx.json (SavedModel and TFLite keep no names, ``-1``; a ``.pt2``
    program its own ``s18``). Fixed sizes stay as read; ``outputs=False`` leaves outputs as read (an
    artifact in another layout may hold a 4-D output either way)."""
    pins = {s.name: s for s in (*pinned.inputs, *(pinned.outputs if outputs else ()))}

    def spelled(g: TensorSpec) -> TensorSpec:
        p = pins.get(g.name)
        if p is None or p.rank != g.rank:
            return g
        dims = tuple(
            pd if is_dynamic(gd) and isinstance(pd, str) else gd for pd, gd in zip(p.shape, g.shape, strict=True)
        )
        return TensorSpec(g.name, g.dtype, dims)

    return Signature(tuple(map(spelled, got.inputs)), tuple(map(spelled, got.outputs)))


def _dims(spec: TensorSpec) -> str:
    return "[" + ",".join(str(d) for d in spec.shape) + "]"


def in_layout(pinned: Signature, source: str | None, target: str | None, *, outputs: bool = False) -> Signature:
    """The pin as an artifact of layout ``target`` shows it: 4-D inputs (and ``outputs``) moved from ``source``."""

    def move(spec: TensorSpec) -> TensorSpec:
        if spec.rank != 4:
            return spec
        return TensorSpec(
            spec.name, spec.dtype, tuple(d for d in shape_to(spec.shape, source, target) if isinstance(d, (int, str)))
        )

    return Signature(
        tuple(move(s) for s in pinned.inputs), tuple(move(s) for s in pinned.outputs) if outputs else pinned.outputs
    )


def check_readback(
    fmt: Format,
    path: Path,
    pinned: Signature,
    got: Signature,
    *,
    opset: int | None = None,
    precision: str = "fp32",
    layouts: tuple[str | None, str | None] = (None, None),
) -> int | None:
    """Raise ``SignatureMismatchError`` if the artifact departs from the pin; return its ONNX opset.

    Quantised artifacts may carry integer I/O, so dtypes are only held to the
    pin at fp32/fp16. ``layouts`` is (the pin's, the artifact's).
    """
    check = precision in ("fp32", "fp16")
    problems = differences(in_layout(pinned, *layouts), got, check_dtypes=check)
    if problems and layouts[0] != layouts[1]:
        moved = differences(in_layout(pinned, *layouts, outputs=True), got, check_dtypes=check)
        problems = moved if len(moved) < len(problems) else problems
    if fmt is Format.PT2:
        problems += shared_dims(in_layout(pinned, *layouts), got)
    written = onnx_opset(load_onnx(path)) if fmt is Format.ONNX else None
    if fmt is Format.ONNX and opset is not None and written != opset:
        problems.append(f"the file declares opset {written}, pinned {opset}")
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise SignatureMismatchError(
            f"{fmt} artifact read back differs from the pinned signature: {problems[0]}{more}",
            hint="the exporter changed the model's interface; rerun with --debug, or pin "
            "the dims this format cannot keep dynamic as numbers",
        )
    return written
