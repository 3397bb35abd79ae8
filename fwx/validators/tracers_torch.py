"""Tracer for an eager PyTorch module: every submodule's output, through forward hooks.

Hooks fire when a module returns, so children come before their parents, in
the order the forward pass ran them. A module's qualified name
(``layer1.0.conv1``) is the scope torch.onnx writes into node names.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fwx.runtimes.base import Runtime
from fwx.validators.locate_match import Probe
from fwx.validators.tracers import Trace


class TorchTracer:
    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self._module: Any = getattr(rt, "_module")  # noqa: B009 - the runtime's module, not public API

    def trace(self, feed: dict[str, np.ndarray]) -> Trace:
        out: Trace = []
        seen: dict[str, int] = {}

        def hook(name: str, kind: str) -> Any:
            def record(_mod: Any, _inputs: Any, result: Any) -> None:
                if isinstance(result, torch.Tensor) and result.dtype.is_floating_point:
                    seen[name] = seen.get(name, 0) + 1
                    key = name if seen[name] == 1 else f"{name}#{seen[name]}"  # a module called again
                    value = result.detach().float().cpu().numpy()
                    out.append((Probe(key, key, kind, f"module {name}"), value))

            return record

        handles = [
            m.register_forward_hook(hook(name, type(m).__name__)) for name, m in self._module.named_modules() if name
        ]
        try:
            self._rt.infer(feed)
        finally:
            for h in handles:
                h.remove()
        return out


def _flat(rt: Runtime, feed: dict[str, np.ndarray]) -> dict[str, Any]:
    """The runtime's inputs in its order, as tensors on its device (as its own ``infer`` passes them)."""
    from fwx.runtimes._common import gather

    device = getattr(rt, "_torch_device", torch.device("cpu"))
    arrays = gather(feed, getattr(rt, "_dtypes"))  # noqa: B009 - the runtime's input dtypes, not public API
    return {n: torch.from_numpy(np.array(a, copy=True)).to(device) for n, a in arrays.items()}


class Pt2Tracer:
    """An ExportedProgram's every module output, read from its FX graph.

    ``ep.module()`` keeps no submodules to hook, but each node records the modules it ran inside
    (``nn_module_stack``): a module's output is the last node inside it, named as torch.onnx scopes it.
    """

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self._graph: Any = getattr(rt, "program").module()  # noqa: B009 - the runtime's program

    def trace(self, feed: dict[str, np.ndarray]) -> Trace:
        import torch.fx

        seen: list[tuple[Any, np.ndarray]] = []

        class Recorder(torch.fx.Interpreter):
            def run_node(self, n: Any) -> Any:
                result = super().run_node(n)
                if n.op == "call_function" and isinstance(result, torch.Tensor) and result.dtype.is_floating_point:
                    seen.append((n, result.detach().float().cpu().numpy()))
                return result

        with torch.inference_mode():
            Recorder(self._graph).run(*_flat(self._rt, feed).values())
        last: dict[str, tuple[int, str]] = {}
        for i, (n, _) in enumerate(seen):
            for path, kind in (n.meta.get("nn_module_stack") or {}).values():
                if path:
                    last[path] = (i, str(getattr(kind, "__name__", kind)).rsplit(".", 1)[-1])
        order = sorted(last, key=lambda p: (last[p][0], -p.count(".")))
        return [(Probe(p, p, last[p][1], f"module {p}"), seen[last[p][0]][1]) for p in order]


class ScriptTracer:
    """A ScriptModule traced through its ONNX conversion (torch.onnx, the exporter fwx converts it with),
    made once per input shape: its node names keep the module scopes, and an artifact converted from the
    same module keeps the same tensor names. Refused when the conversion disagrees with the module."""

    #: Relative L2 error between the module's outputs and its conversion's beyond which the conversion is no
    #: stand-in for it (float32 rounding leaves ~1e-7).
    AGREE = 1e-4

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self._module: Any = getattr(rt, "_module")  # noqa: B009 - the runtime's module, not public API
        self._tracers: dict[tuple[Any, ...], Any] = {}

    def trace(self, feed: dict[str, np.ndarray]) -> Trace:
        args = _flat(self._rt, feed)
        key = tuple((n, tuple(t.shape), str(t.dtype)) for n, t in args.items())
        if key not in self._tracers:
            self._tracers[key] = self._convert(args)
        tracer = self._tracers[key]
        trace: Trace = tracer.trace({n: t.cpu().numpy() for n, t in args.items()})
        values = {p.tensor: v for p, v in trace}
        expected = self._rt.infer(feed)
        for name, out in zip(self._rt.signature().output_names, tracer.outputs, strict=False):
            want, got = np.asarray(expected[name], np.float64), values.get(out)
            if got is None or got.size != want.size:
                continue
            err = float(np.linalg.norm(want.ravel() - got.astype(np.float64).ravel()))
            if not err <= self.AGREE * max(float(np.linalg.norm(want)), 1e-12):
                raise ValueError(f"the reference's ONNX conversion disagrees with it on {name!r} (rel err above 1e-4)")
        return trace

    def _convert(self, args: dict[str, Any]) -> Any:
        import tempfile
        import warnings
        from pathlib import Path

        from fwx.validators.tracers import OnnxTracer

        with tempfile.TemporaryDirectory(prefix="fwx-locate-") as tmp:
            path = Path(tmp) / "reference.onnx"
            with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
                warnings.simplefilter("ignore")
                torch.onnx.export(
                    self._module,
                    tuple(args.values()),
                    str(path),
                    dynamo=False,
                    input_names=list(args),
                    opset_version=17,
                )
            return OnnxTracer(path)
