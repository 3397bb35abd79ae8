"""``torch.export`` ExportedProgram artifacts (``.pt2``).

The program records dtypes and shapes (dynamic dims as SymInts such as
``s0``), which ``signature()`` reads back; names come from ``signature_hint``
when its counts match, else from the program's placeholders. On ``cuda`` the
program is moved with ``move_to_device_pass`` before ``.module()`` is built.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from fwx.errors import FwxError, InputError, first_line
from fwx.formats import Format
from fwx.quiet import quiet
from fwx.runtimes._common import dynamic_dim, hint_names
from fwx.runtimes._torch import TorchRuntimeBase, torch_dtype_name
from fwx.runtimes.pt2_trees import call_flat, register_dict_types, unknown_types
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
        return _load_bytes(data)
    except FwxError:
        raise
    except Exception as exc:  # noqa: BLE001 - torch raises anything on a bad archive
        error = exc
    # A container type this process has not registered (a Hugging Face ModelOutput) fails the load;
    # stand in a plain dict type where the file records a dict's keys, and refuse any other by name.
    unknown = unknown_types(data)
    if not unknown:
        raise InputError(
            f"cannot load {path} as a torch.export program: {first_line(error)}",
            hint="the file is probably truncated, corrupt or from a newer torch",
        ) from error
    others = sorted(name for name, as_dict in unknown.items() if not as_dict)
    if others:
        raise InputError(
            f"cannot load {path}: its inputs or outputs are a {others[0]}, a type torch rebuilds only by "
            "importing the code that defines it",
            hint="export a wrapper whose forward takes and returns tensors, tuples or dicts of tensors",
        ) from error
    register_dict_types(sorted(unknown))
    try:
        return _load_bytes(data)
    except Exception as exc:  # noqa: BLE001 - torch raises anything on a bad archive
        raise InputError(
            f"cannot load {path} as a torch.export program: {first_line(exc)}",
            hint="the file is probably truncated, corrupt or from a newer torch",
        ) from exc


def _load_bytes(data: bytes) -> Any:
    with quiet():
        return torch.export.load(io.BytesIO(data))


def program_callable(ep: Any) -> Callable[..., Any]:
    """``ep.module()`` called with tensors in the program's flat input order, whether it was exported
    with positional ``args`` or with ``kwargs`` (then each is passed by name)."""
    module = ep.module()
    spec = ep.call_spec.in_spec

    def call(*flat: Any) -> Any:
        return call_flat(module, spec, flat)

    return call


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
        self._module = program_callable(ep)
        self._finish(program_signature(ep, self.signature_hint))

    @property
    def program(self) -> Any:
        """The loaded ExportedProgram (its ``Dim`` ranges say which sizes it admits)."""
        return self._program
