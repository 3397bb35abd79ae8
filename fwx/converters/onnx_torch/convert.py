"""ONNX -> TorchScript / ExportedProgram: translate, script or export, write, read back, verify.

Both edges share this flow; they differ only in the writer (``writers.py``).
The hop fails (ExportError naming it) unless the artifact, as loaded back from
disk, matches onnxruntime at the sample sizes and at other batch/sequence
sizes.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch

import fwx
from fwx.converters.base import ConvertOptions, ConvertResult, SourceModel
from fwx.converters.onnx_torch import sample as smp
from fwx.converters.onnx_torch.translate import check_supported, load_model, translate
from fwx.converters.onnx_torch.verify import Check, fixed_symbols, references, size_sets, verify
from fwx.converters.onnx_torch.writers import write_pt2, write_torchscript
from fwx.errors import ExportError, InputError, first_line
from fwx.formats import Format
from fwx.quiet import quiet
from fwx.runtimes.files import load_onnx
from fwx.signature import Signature

TOOL = "fwx-onnx-torch"
TARGET_NAMES = {Format.TORCHSCRIPT: "TorchScript", Format.PT2: "torch.export (.pt2)"}
SIGNATURE_FILE = "fwx_signature.json"


def precheck(path: Path | None, target: Format | None = None) -> None:
    """List every unsupported op at once, reading only the graph (no weights, no torch work)."""
    if path is None:
        raise InputError("the ONNX -> PyTorch translator needs an ONNX file on disk", hint="pass a .onnx path")
    check_supported(load_onnx(path), TARGET_NAMES.get(target, "PyTorch") if target else "PyTorch")


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 4  # sizes it rejects are expected; we record them
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _run_error(session: ort.InferenceSession, feeds: dict[str, np.ndarray]) -> str | None:
    try:
        session.run(None, feeds)
    except Exception as e:  # noqa: BLE001 - any onnxruntime failure means "try other sizes"
        return first_line(e, 200)
    return None


def _sample(
    model: onnx.ModelProto, sig: Signature, session: ort.InferenceSession, given: dict[str, Any]
) -> tuple[dict[str, int], dict[str, np.ndarray], dict[str, int], list[str]]:
    """(sizes, inputs, index bounds, notes) to trace with.

    The given sample when onnxruntime runs it; dims below 2 are raised to 2 first (torch.export would
    specialise them). Otherwise generated sizes that onnxruntime accepts.
    """
    bounds = smp.index_bounds(model)
    candidates: list[dict[str, int]] = []
    notes: list[str] = []
    if given and all(s.name in given for s in sig.inputs):
        sizes = smp.sizes_of(sig, given)
        feeds = {s.name: np.asarray(given[s.name]).astype(s.dtype) for s in sig.inputs}
        if all(v >= 2 for v in sizes.values()) and _run_error(session, feeds) is None:
            return sizes, feeds, bounds, notes
        candidates.append({k: max(v, 2) for k, v in sizes.items()})
        notes.append("traced with generated inputs: the given sample has a dynamic dim below 2 or does not run")
    candidates += [smp.default_sizes(sig, scale) for scale in (1, 8, 32)]
    last: str | None = None
    for sizes in candidates:
        feeds = smp.make_inputs(sig, sizes, bounds)
        last = _run_error(session, feeds)
        if last is None:
            return sizes, feeds, bounds, notes
    raise ExportError(
        f"onnxruntime cannot run the ONNX model on generated inputs: {last}",
        hint="pass inputs the model accepts (fwx export --example-inputs FILE.npz)",
    )


def _torch_args(sig: Signature, feeds: dict[str, np.ndarray]) -> tuple[torch.Tensor, ...]:
    return tuple(torch.from_numpy(np.ascontiguousarray(feeds[s.name])) for s in sig.inputs)


def _runner(module: Callable[..., Any]) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        with torch.no_grad():
            out = module(*(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays))
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return [o.detach().cpu().numpy() for o in outs]

    return run


def _load(target: Format, out: Path) -> Callable[..., Any]:
    if target is Format.TORCHSCRIPT:
        module: Callable[..., Any] = torch.jit.load(str(out)).eval()
        return module
    from fwx.runtimes.pt2 import load_program  # the one .pt2 loader (trusted: fwx wrote this file just now)

    return load_program(out, trust=True).module()  # type: ignore[no-any-return]


def convert(src: SourceModel, out: Path, opts: ConvertOptions, target: Format) -> ConvertResult:
    hop = f"onnx -> {target}"
    started = time.perf_counter()
    if src.path is None:
        raise InputError(f"{hop}: the source ONNX model has no path", hint="write the ONNX file first")
    model = load_model(src.path)
    check_supported(model)
    sig = smp.onnx_signature(model)
    session = _session(model)
    sizes, feeds, bounds, notes = _sample(model, sig, session, dict(src.sample_inputs))

    given = not notes and all(s.name in src.sample_inputs for s in sig.inputs)

    def make(s: dict[str, int]) -> dict[str, np.ndarray]:
        if s == sizes:
            return feeds
        return smp.tile_to(sig, feeds, s) if given else smp.make_inputs(sig, s, bounds, seed=sum(s.values()))

    refs = references(session, size_sets(sizes, opts.static_shapes), make)
    fixed = fixed_symbols(refs)
    if fixed:
        notes.append(f"dims {', '.join(fixed)} are fixed by the ONNX graph: onnxruntime rejects other sizes")
    gm = translate(model, refs[0].feeds)
    result_sig, info = _write(gm, sig, sizes, out, opts, target, notes, fixed, refs[0].feeds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        checks = verify(_runner(_load(target, out)), sig, refs)
    _raise_on_failure(hop, checks)
    notes += _summary(checks)
    info["verification"] = [c.to_json() for c in checks]
    info["seconds"] = round(time.perf_counter() - started, 3)
    return ConvertResult(
        path=out,
        signature=result_sig,
        tool=TOOL,
        tool_version=f"fwx {fwx.__version__}, torch {torch.__version__}",
        layout=src.layout,
        precision=src.precision,
        notes=notes,
        extra=info,
    )


def _write(
    gm: torch.fx.GraphModule,
    sig: Signature,
    sizes: dict[str, int],
    out: Path,
    opts: ConvertOptions,
    target: Format,
    notes: list[str],
    fixed: list[str],
    feeds: dict[str, np.ndarray],
) -> tuple[Signature, dict[str, Any]]:
    """Write the artifact; return the signature it has and what to record about how it was made."""
    result_sig = smp.pinned(sig, sizes) if opts.static_shapes else sig
    extra = {SIGNATURE_FILE: json.dumps(result_sig.to_json())}
    args = _torch_args(sig, feeds)
    info: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if target is Format.TORCHSCRIPT:
                info["torchscript_mode"] = write_torchscript(gm, args, out, opts, extra, notes)
            else:
                # a failing torch.export print()s the whole graph (hundreds of lines) to stderr; the
                # error itself comes back as one line, the graph with --debug
                with quiet():
                    exported = write_pt2(gm, args, sig, out, opts, extra, notes, fixed)
                result_sig = smp.pinned(exported, sizes) if opts.static_shapes else exported
        except ExportError:
            raise
        except Exception as e:
            raise ExportError(
                f"onnx -> {target}: {type(e).__name__}: {first_line(e)}",
                hint="run with --debug for details, or convert through another path",
            ) from e
    return result_sig, info


def _raise_on_failure(hop: str, checks: list[Check]) -> None:
    bad = [c for c in checks if not c.ok]
    if not bad:
        return
    guarded = [c for c in bad if any("Guard failed" in p for p in c.problems)]
    if guarded:
        # torch.export kept the dims dynamic but proved the program only for a class of sizes (a Swin's
        # windows: size % (size // 4) == 0 ...); the guard it wrote is a page of arithmetic, not a reason
        raise ExportError(
            f"{hop} ({TOOL}): torch.export specialised the program to some sizes of its dynamic dims: it "
            f"refuses to run at {guarded[0].sizes}, which onnxruntime runs",
            hint="pin those dims with --input (e.g. x:float32[N,3,224,224]), or convert through another path",
        )
    where = "; ".join(f"at {c.sizes}: {', '.join(c.problems)}" for c in bad[:3])
    raise ExportError(
        f"{hop} ({TOOL}): the artifact disagrees with onnxruntime {where}",
        hint="convert through another path (fwx export --plan lists them) and please report the model",
    )


def _summary(checks: list[Check]) -> list[str]:
    ran = [c for c in checks if c.skipped is None]
    worst = max((c.max_abs_err for c in ran), default=0.0)
    return [f"matches onnxruntime at {len(ran)} of {len(checks)} size set(s), max abs err {worst:.2e}"]
