"""Shared PyTorch plumbing for the torch edges: flat outputs, sample tensors, dynamic Dims.

Every torch exporter sees the same wrapped module, so TorchScript, ``.pt2`` and
ONNX agree on the order of outputs (a dict output keeps its key order); outputs
are flattened by the runtimes' own ``flatten_outputs``, so eager reference and
artifacts line up.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from fwx.errors import first_line
from fwx.frameworks import require
from fwx.quiet import quiet
from fwx.signature import Signature
from fwx.sources.samples import make_feeds


def wrap(module: Any, sig: Signature) -> Any:
    """The module with a flat tuple of outputs and ``forward`` parameters named after the pinned inputs.

    Exporters disagree about dict and nested outputs; ``torch.export`` and
    ``jit.trace`` name the program's inputs after ``forward``'s parameters.
    """
    torch = require("torch", "exporting PyTorch models")
    if isinstance(module, torch.jit.ScriptModule):
        return module  # already typed; tracing through it inside a wrapper is not supported
    # the runtimes' reading of outputs, so both agree (imported here: fwx.runtimes._torch imports torch)
    from fwx.runtimes._torch import flatten_outputs

    params = ", ".join(identifiers(sig.input_names))
    namespace: dict[str, Any] = {"flatten": flatten_outputs}
    exec(f"def forward(self, {params}):\n    return tuple(flatten(self.inner({params}))[0])\n", namespace)  # noqa: S102

    class FlatOutputs(torch.nn.Module):  # type: ignore[name-defined,misc]
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        forward = namespace["forward"]

        def train(self, mode: bool = True) -> FlatOutputs:
            self.training = mode  # not recursive: a torch.export program refuses train()/eval()
            return self

    return FlatOutputs(module).eval()


@contextlib.contextmanager
def export_mode() -> Iterator[None]:
    """Run a torch exporter: no autograd, no MHA fast path, no framework output on the terminal.

    Under ``no_grad`` an eval-mode ``nn.TransformerEncoderLayer`` takes the fused
    fast path (``aten::_transformer_encoder_layer_fwd``), which no ONNX opset
    expresses; the legacy exporter then fails and prints whole "Torch IR graph"
    screens to fd 1. The fast path is switched off for the export and restored.
    """
    torch = require("torch", "exporting PyTorch models")
    mha = getattr(torch.backends, "mha", None)
    was = mha.get_fastpath_enabled() if mha is not None else None
    if mha is not None:
        mha.set_fastpath_enabled(False)
    try:
        with quiet(native=True, stdout=True), torch.no_grad():
            yield
    finally:
        if mha is not None:
            mha.set_fastpath_enabled(was)


def identifiers(names: Sequence[str]) -> list[str]:
    """Python identifiers for tensor names (``input.1`` -> ``input_1``), unique, never keywords."""
    import keyword

    out: list[str] = []
    for name in names:
        ident = _identifier(name)
        ident = f"{ident}_" if keyword.iskeyword(ident) or ident == "self" else ident
        while ident in out:
            ident += "_"
        out.append(ident)
    return out


def tensors(feeds: Mapping[str, np.ndarray], sig: Signature) -> tuple[Any, ...]:
    torch = require("torch", "exporting PyTorch models")
    return tuple(torch.from_numpy(np.ascontiguousarray(feeds[name])) for name in sig.input_names)


def run(module: Any, feeds: Mapping[str, np.ndarray], sig: Signature) -> Any:
    """Raw outputs of one eval-mode forward pass without autograd."""
    torch = require("torch", "exporting PyTorch models")
    with torch.no_grad():
        return module(*tensors(feeds, sig))


def dims_for(sig: Signature) -> tuple[dict[int, Any] | None, ...]:
    """``torch.export`` dynamic_shapes for the inputs in order; one ``Dim`` per symbol, shared across inputs."""
    torch = require("torch", "exporting PyTorch models")
    made: dict[str, Any] = {}
    shapes: list[dict[int, Any] | None] = []
    for spec in sig.inputs:
        axes = {}
        for axis in spec.dynamic_axes:
            sym = str(spec.shape[axis])
            if sym not in made:
                made[sym] = torch.export.Dim(_identifier(sym))
            axes[axis] = made[sym]
        shapes.append(axes or None)
    return tuple(shapes)


def _identifier(sym: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in sym)
    return out if out and not out[0].isdigit() else f"d_{out}"


def forward_arity(module: Any) -> tuple[int, int] | None:
    """(required, maximum) positional inputs of ``forward``, or None when it takes ``*args``."""
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return None
    positional = [
        p for p in params if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    required = [p for p in positional if p.default is inspect.Parameter.empty]
    return len(required), len(positional)


def baked_sizes(
    traced: Any, eager: Any, sig: Signature, sample: Mapping[str, np.ndarray], other: Mapping[str, int] | None = None
) -> str | None:
    """Why ``traced`` cannot run at sizes other than ``sample``'s (crash or other numbers), or None if it can.

    ``other`` gives the sizes to try (the exporter's second probe set, which keeps a .pt2's Dim ranges);
    a symbol without one is tried at +3.
    """
    torch = require("torch", "exporting PyTorch models")
    sizes: dict[str, int] = {}
    for spec in sig.inputs:
        for d, n in zip(spec.shape, np.shape(sample[spec.name]), strict=False):
            if isinstance(d, str):
                alt = (other or {}).get(d)
                sizes.setdefault(d, alt if alt is not None and alt != int(n) else int(n) + 3)
    if not sizes:
        return None
    feeds = make_feeds(sig.inputs, sizes, seed=1)
    at = ", ".join(f"{k}={v}" for k, v in sizes.items())
    with torch.no_grad():
        want = [np.asarray(t) for t in eager(*tensors(feeds, sig))]
        try:
            got = [np.asarray(t) for t in traced(*tensors(feeds, sig))]
        except Exception as exc:  # noqa: BLE001 - the TorchScript interpreter raises anything
            return f"it fails at {at}: {first_line(exc, 160)}"
    for name, w, g in zip(sig.output_names, want, got, strict=False):
        if w.shape != g.shape or not np.allclose(w, g, rtol=1e-4, atol=1e-5):
            return f"output {name!r} differs from the model at {at}"
    return None
