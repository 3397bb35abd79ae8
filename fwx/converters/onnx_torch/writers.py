"""Write the translated GraphModule as TorchScript (script, or a checked trace) or as a .pt2.

Both artifacts carry ``fwx_signature.json`` (the pinned names, dtypes, dims) as
an extra file, because neither format keeps the ONNX input/output names.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from fwx.converters.base import ConvertOptions
from fwx.converters.onnx_torch import sample as smp
from fwx.converters.onnx_torch.builder import identifier
from fwx.errors import ExportError, first_line
from fwx.signature import Signature, TensorSpec


def write_torchscript(
    gm: torch.fx.GraphModule,
    args: tuple[torch.Tensor, ...],
    out: Path,
    opts: ConvertOptions,
    extra: dict[str, str],
    notes: list[str],
) -> str:
    """Script (keeps every size symbolic); trace only when asked or when scripting fails.

    A trace bakes sizes, which is why the caller verifies at other sizes whatever the mode.
    """
    mode = opts.torchscript_mode
    module: Any = None
    if mode in ("auto", "script"):
        try:
            module = torch.jit.script(gm)
            mode = "script"
        except Exception as e:
            first = first_line(e)
            if mode == "script":
                raise ExportError(
                    f"onnx -> torchscript: torch.jit.script failed: {first}",
                    hint="try --torchscript-mode trace (verified at other sizes) or the .pt2 target",
                ) from e
            notes.append(f"torch.jit.script failed ({first[:120]}); traced instead")
            mode = "trace"
    if module is None:
        module = torch.jit.trace(gm, args, check_trace=False)
    torch.jit.save(module, str(out), _extra_files=extra)
    return mode


def _dims(sig: Signature, static: Sequence[str]) -> tuple[dict[int, Any], ...]:
    """One ``Dim`` per ONNX dim_param, shared by name across inputs; ``static`` symbols stay fixed."""
    from torch.export import Dim

    made: dict[str, Any] = {}
    return tuple(
        {
            i: made.setdefault(d, Dim(identifier(d, "d")))
            for i, d in enumerate(spec.shape)
            if isinstance(d, str) and d not in static
        }
        for spec in sig.inputs
    )


def write_pt2(
    gm: torch.fx.GraphModule,
    args: tuple[torch.Tensor, ...],
    sig: Signature,
    out: Path,
    opts: ConvertOptions,
    extra: dict[str, str],
    notes: list[str],
    fixed: Sequence[str],
) -> Signature:
    """torch.export with named Dims, refined by torch's suggested fixes when it proves a bound; ``Dim.AUTO`` last.

    ``fixed`` are dims the ONNX graph itself pins (onnxruntime rejects other sizes); they are exported static
    rather than spending an export attempt to find out.
    """
    from torch.export import Dim

    if opts.static_shapes:
        torch.export.save(torch.export.export(gm, args), str(out), extra_files=extra)
        return sig
    named = _dims(sig, fixed)
    try:
        ep = torch.export.export(gm, args, dynamic_shapes=named)
    except Exception as e:  # noqa: BLE001 - any export failure: refine the named Dims, else Dim.AUTO
        ep = _refined(gm, args, named, e, notes)
    if ep is None:
        auto = tuple(
            {i: Dim.AUTO for i, d in enumerate(s.shape) if isinstance(d, str) and d not in fixed} for s in sig.inputs
        )
        ep = torch.export.export(gm, args, dynamic_shapes=auto)
    torch.export.save(ep, str(out), extra_files=extra)
    return exported_signature(ep, sig, notes)


def _refined(
    gm: torch.fx.GraphModule,
    args: tuple[torch.Tensor, ...],
    named: tuple[dict[int, Any], ...],
    error: Exception,
    notes: list[str],
) -> Any:
    """Named Dims with the bounds torch suggests (BERT's ``seq`` <= its position table), or None.

    Dim.AUTO would also export, but it loses what the names say: two inputs whose batch only meets
    through broadcasting (a mask) come out as unrelated dims, so the shared batch would be gone.
    torch's own ``refine_dynamic_shapes_from_suggested_fixes`` trips over the message's trailing text
    (torch 2.13), so the ``name = Dim('name', min=.., max=..)`` lines are read here.
    """
    from torch.export import Dim

    text = str(error)
    fixes = {m["name"]: m for m in _FIX.finditer(text.partition("Suggested fixes:")[2])}
    if not fixes:
        notes.append(f"named Dims rejected by torch.export ({first_line(error, 160)}); used Dim.AUTO")
        return None
    made: dict[str, Any] = {}

    def bounded(d: Any) -> Any:
        fix = fixes.get(d.__name__)
        if fix is None:
            return d
        lo, hi = fix["min"], fix["max"]
        return made.setdefault(
            d.__name__, Dim(d.__name__, min=int(lo) if lo else 0, **({"max": int(hi)} if hi else {}))
        )

    shapes = tuple({i: bounded(d) for i, d in spec.items()} for spec in named)
    try:
        ep = torch.export.export(gm, args, dynamic_shapes=shapes)
    except Exception as e:  # noqa: BLE001 - the caller falls back to Dim.AUTO
        notes.append(
            f"named Dims rejected by torch.export ({first_line(error, 160)}; with its suggested bounds: "
            f"{first_line(e, 80)}); used Dim.AUTO"
        )
        return None
    notes.append("named Dims bounded as torch.export suggested: " + ", ".join(sorted(fixes)))
    return ep


_FIX = re.compile(r"^\s*(?P<name>\w+) = Dim\('(?P=name)'(?:, min=(?P<min>\d+))?(?:, max=(?P<max>\d+))?\)\s*$", re.M)


def exported_signature(ep: Any, sig: Signature, notes: list[str]) -> Signature:
    """The ONNX signature, with the dims torch.export made static written as the ints they became."""
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    fixed: dict[str, int] = {}
    specs = []
    for spec, name in zip(sig.inputs, ep.graph_signature.user_inputs, strict=True):
        dims = []
        for d, s in zip(spec.shape, nodes[name].meta["val"].shape, strict=True):
            if isinstance(d, str) and is_concrete_int(s):
                if d not in fixed:
                    notes.append(f"the .pt2 fixes dim {d!r} at {int(s)}")
                fixed[d] = int(s)
            dims.append(int(s) if isinstance(d, str) and is_concrete_int(s) else d)
        specs.append(TensorSpec(spec.name, spec.dtype, tuple(dims)))
    return smp.pinned(Signature(tuple(specs), sig.outputs), fixed)
