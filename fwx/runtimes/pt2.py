"""``torch.export`` ExportedProgram artifacts (``.pt2``).

The program records dtypes and shapes (dynamic dims as SymInts such as
``s0``), which ``signature()`` reads back; names come from ``signature_hint``
when its counts match, else from the program's placeholders. On ``cuda`` the
program is moved with ``move_to_device_pass`` before ``.module()`` is built.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch

from fwx.errors import FwxError, InputError, first_line
from fwx.formats import Format
from fwx.frameworks import quiet
from fwx.runtimes._common import dynamic_dim, hint_names
from fwx.runtimes._torch import TorchRuntimeBase, torch_dtype_name
from fwx.signature import Signature, TensorSpec


def _spec(name: str, val: Any) -> TensorSpec:
    if not isinstance(val, torch.Tensor):
        return TensorSpec(name, "float32", ())
    dims = tuple(dynamic_dim(d if isinstance(d, int) else str(d)) for d in val.shape)
    return TensorSpec(name, torch_dtype_name(val.dtype), dims)


def load_program(path: Path, *, trust: bool) -> Any:
    """The one ``.pt2`` loader (runtime, export source, inspect): scan every member, then load those bytes.

    ``torch.export.load`` retries failed safe loads with ``weights_only=False``,
    so nothing reaches it before ``fwx.safety.pt2_bytes`` cleared the archive.
    """
    from fwx.safety import pt2_bytes

    data = pt2_bytes(path, trust=trust)
    try:
        with quiet():
            return torch.export.load(io.BytesIO(data))
    except FwxError:
        raise
    except Exception as exc:  # noqa: BLE001 - torch raises anything on a bad archive
        raise InputError(
            f"cannot load {path} as a torch.export program: {first_line(exc)}",
            hint="the file is probably truncated, corrupt or from a newer torch",
        ) from exc


def program_signature(ep: Any, hint: Signature | None) -> Signature:
    """Inputs/outputs of an ExportedProgram as recorded in its graph."""
    from torch.export.graph_signature import InputKind, OutputKind

    nodes = {n.name: n for n in ep.graph.nodes}
    gs = ep.graph_signature
    in_args = [s.arg.name for s in gs.input_specs if s.kind == InputKind.USER_INPUT]
    out_args = [
        getattr(s.arg, "name", f"output_{i}") for i, s in enumerate(gs.output_specs) if s.kind == OutputKind.USER_OUTPUT
    ]
    in_names = hint_names(hint, len(in_args), in_args)
    out_names = (
        hint.output_names
        if hint is not None and len(hint.outputs) == len(out_args)
        else [f"output_{i}" for i in range(len(out_args))]
    )
    inputs = tuple(
        _spec(n, nodes[a].meta.get("val") if a in nodes else None) for n, a in zip(in_names, in_args, strict=True)
    )
    outputs = tuple(
        _spec(n, nodes[a].meta.get("val") if a in nodes else None) for n, a in zip(out_names, out_args, strict=True)
    )
    return Signature(inputs, outputs)


class ExportedProgramRuntime(TorchRuntimeBase):
    format = Format.PT2

    def _load(self) -> None:
        self._setup_device()
        assert self.path is not None
        ep = load_program(self.path, trust=self.trust_model_code)
        if self._torch_device.type == "cuda":
            from torch.export.passes import move_to_device_pass

            ep = move_to_device_pass(ep, self._torch_device)
        self._program = ep
        self._module = ep.module()
        self._finish(program_signature(ep, self.signature_hint))
