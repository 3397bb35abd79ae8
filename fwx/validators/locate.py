"""Locate a mismatch: the first node, in the artifact's graph order, whose output leaves tolerance.

Runs only after an artifact failed validation (a passing artifact costs
nothing). The reference and the artifact are traced on the same samples
(every intermediate tensor each runtime exposes, ``fwx.validators.tracers``),
artifact tensors are paired with reference tensors by the names converters
keep (``fwx.validators.locate_match``), and each pair is judged with the
validation policy at the artifact's precision.

A pair out of tolerance is named only when the error carries on: the next
compared node downstream of it is out of tolerance too (or it is the last).
A converter that fused a layer's tail into the next op (TFLite folds a Keras
BatchNormalization's add into the following convolution's bias) leaves a
tensor that differs from the layer's output while the model is right; a real
fault does not heal one node later.

And only when its error rises materially above its inputs' error: its ratio
exceeds ``RISE`` times the worst ratio of the compared nodes it reads from
(through any unpaired nodes between them). Quantisation error grows a little
at every node (at most 6.5x from one compared node to the next on the INT8
digits CNN and tiny ResNet of the quantisation tests; a planted weight fault
rises 82x or more); a node that inherits an error it did not add is not the
fault. Nodes only one side has, just before the named node, are named with it
(``fwx.validators.locate_graph``).

Never raises while measuring: a runtime that cannot be traced is a note.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fwx.errors import first_line
from fwx.formats import Format
from fwx.runtimes.base import Runtime
from fwx.signature import Signature
from fwx.validators.compare import metrics
from fwx.validators.judge import check_signature
from fwx.validators.layout import inputs_to
from fwx.validators.locate_graph import missing, unpaired_between, with_inputs
from fwx.validators.locate_match import Pair, Probe, pair
from fwx.validators.mismatch import Mismatch, NodeError
from fwx.validators.policy import Policy
from fwx.validators.report import ValidationReport
from fwx.validators.tracers import OnnxTracer, TFLiteTracer, Trace, Tracer

#: Samples traced at most: those whose outputs disagree most with the reference's (see ``_failing``).
TRACED_SAMPLES = 2

#: How many times its inputs' error a node's error must be to be the fault (see the module docstring).
RISE = 10.0


@dataclass(frozen=True)
class Side:
    """One model to trace: its runtime, how the report names it, its layout and precision."""

    runtime: Runtime
    label: str
    layout: str | None = None
    precision: str = "fp32"


def tracer_for(rt: Runtime) -> Tracer | None:
    """The tracer for a validated runtime (None: its format exposes no intermediate tensors to fwx)."""
    inner = getattr(rt, "inner", None)  # the exporter's remembering wrapper around the source runtime
    if isinstance(inner, Runtime):
        rt = inner
    if rt.format is Format.ONNX and rt.path is not None:
        return OnnxTracer(rt.path)
    if rt.format is Format.TFLITE and rt.path is not None:
        return TFLiteTracer(rt.path, rt.signature().input_names)
    if rt.format is Format.SAVEDMODEL and rt.path is not None:
        from fwx.validators.tracers_tf import SavedModelTracer

        return SavedModelTracer(rt.path, rt.options.get("signature_name") or "serving_default")
    if rt.format is Format.KERAS:
        from fwx.validators.tracers_tf import KerasTracer

        return KerasTracer(rt)
    if rt.format is Format.PYTORCH:
        from fwx.validators.tracers_torch import TorchTracer

        return TorchTracer(rt)
    if rt.format is Format.TORCHSCRIPT and getattr(rt, "_module", None) is not None:
        from fwx.validators.tracers_torch import ScriptTracer

        return ScriptTracer(rt)
    if rt.format is Format.PT2 and getattr(rt, "program", None) is not None:
        from fwx.validators.tracers_torch import Pt2Tracer

        return Pt2Tracer(rt)
    return None


def locate_failures(
    report: ValidationReport,
    reference: Side,
    candidates: Mapping[str, Side],
    samples: Sequence[dict[str, np.ndarray]],
    *,
    signature: Signature,
    policy: Policy | None = None,
) -> None:
    """Set ``mismatch`` on every failed artifact of ``report`` that has a runtime in ``candidates``."""
    for art in report.artifacts:
        side = candidates.get(art.key)
        if art.passed or side is None or not art.outputs:
            continue
        art.mismatch = locate(reference, side, samples, signature=signature, policy=policy)


def locate(
    reference: Side,
    candidate: Side,
    samples: Sequence[dict[str, np.ndarray]],
    *,
    signature: Signature,
    policy: Policy | None = None,
) -> Mismatch:
    """Trace both sides on the first samples and name the first node out of tolerance."""
    try:
        ref_tracer, cand_tracer = tracer_for(reference.runtime), tracer_for(candidate.runtime)
        if ref_tracer is None or cand_tracer is None:
            side = reference if ref_tracer is None else candidate
            return Mismatch(reference.label, "", note=f"{side.runtime.format} exposes no intermediate tensors to fwx")
        mapping, _, _ = check_signature(
            signature, candidate.runtime.signature(), layout=candidate.layout, ref_layout=reference.layout
        )
        if mapping is None:
            return Mismatch(reference.label, "", note="the artifact's inputs do not match the reference's")
        feeds = [
            inputs_to({mapping[k]: v for k, v in s.items() if k in mapping}, reference.layout, candidate.layout)
            for s in samples
        ]
        chosen = _failing(reference, candidate, samples, feeds, signature)
        ref_traces = [ref_tracer.trace(dict(samples[i])) for i in chosen]
        cand_traces = [cand_tracer.trace(feeds[i]) for i in chosen]
    except Exception as exc:  # noqa: BLE001 - locating is a diagnosis: it must not turn a verdict into a crash
        return Mismatch(reference.label, "", note=f"tracing failed: {first_line(exc, 200)}")
    found = compare_traces(ref_traces, cand_traces, reference.label, candidate.precision, policy or Policy())
    found.samples = _which(chosen, len(samples))
    return found


def _failing(
    reference: Side,
    candidate: Side,
    samples: Sequence[dict[str, np.ndarray]],
    feeds: Sequence[dict[str, np.ndarray]],
    signature: Signature,
) -> list[int]:
    """The samples to trace: the one whose outputs disagree most with the reference's (a failure seen on one
    ``--validation-data`` sample is located on that sample), and the runner-up when it disagrees at least
    half as much (both fail; more data steadies the comparison). Ties keep the earlier sample."""
    if len(samples) <= 1:
        return list(range(len(samples)))
    cand_names = candidate.runtime.signature().output_names
    errors = []
    for sample, feed in zip(samples, feeds, strict=True):
        try:
            ref_out, cand_out = reference.runtime.infer(dict(sample)), candidate.runtime.infer(feed)
        except Exception:  # noqa: BLE001 - a sample a side cannot run cannot be traced either: the others are
            errors.append(-1.0)
            continue
        errors.append(_disagreement(ref_out, cand_out, signature.output_names, cand_names))
    if max(errors) < 0:
        return list(range(min(TRACED_SAMPLES, len(samples))))
    order = sorted((i for i in range(len(samples)) if errors[i] >= 0), key=lambda i: (-errors[i], i))
    if len(order) == 1 or (errors[order[0]] > 0 and errors[order[1]] < errors[order[0]] / 2):
        return order[:1]
    return sorted(order[:TRACED_SAMPLES])


def _disagreement(
    ref: Mapping[str, np.ndarray], cand: Mapping[str, np.ndarray], ref_names: Sequence[str], cand_names: Sequence[str]
) -> float:
    """The worst relative L2 error over the outputs (paired by name, else by position); inf for non-finite."""
    names = [(n, n) for n in ref_names if n in ref and n in cand]
    if not names:
        names = [(r, c) for r, c in zip(ref_names, cand_names, strict=False) if r in ref and c in cand]
    worst = 0.0
    for r, c in names:
        a = np.asarray(ref[r])
        b = align(a, np.asarray(cand[c]))
        if b is None or a.dtype.kind not in "fiub" or b.dtype.kind not in "fiub":
            continue
        a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
        if not np.all(np.isfinite(b64[np.isfinite(a64)])):
            return math.inf
        keep = np.isfinite(a64)
        diff = float(np.linalg.norm(a64[keep] - b64[keep]))
        worst = max(worst, diff / max(float(np.linalg.norm(a64[keep])), 1e-12))
    return worst


def _which(chosen: Sequence[int], total: int) -> str:
    if total <= 1:
        return ""
    listed = " and ".join(str(i + 1) for i in chosen)
    return f"sample{'s' if len(chosen) > 1 else ''} {listed} of {total} (where the outputs disagree most)"


def compare_traces(
    ref_traces: Sequence[Trace], cand_traces: Sequence[Trace], label: str, precision: str, policy: Policy
) -> Mismatch:
    """Pair the traces, judge every pair and pick the first confirmed one (see the module docstring)."""
    if not ref_traces or not ref_traces[0] or not cand_traces[0]:
        return Mismatch(label, "", note="no intermediate tensors were traced")
    ref_probes = [p for p, _ in ref_traces[0]]
    cand_probes = [p for p, _ in cand_traces[0]]
    pairs, method = pair(
        ref_probes, cand_probes, [v.size for _, v in ref_traces[0]], [v.size for _, v in cand_traces[0]]
    )
    layers = [
        _judge(pr, ref_probes, cand_probes, ref_traces, cand_traces, precision, policy)
        for pr in pairs
        if _comparable(pr, ref_traces[0], cand_traces[0])
    ]
    found = with_inputs([n for n in layers if n is not None], cand_probes)
    mismatch = Mismatch(label, method, layers=found)
    mismatch.node = _first_confirmed(found, cand_probes)
    if mismatch.node is not None:
        mismatch.inserted = unpaired_between(mismatch.node, found, cand_probes)
        if method == "tensor names":  # the same naming on both sides: a name missing is a node missing
            mismatch.removed = missing(mismatch.node, found, ref_probes, mismatch.inserted)
    elif any(not n.passed for n in found):
        worst = max(found, key=lambda n: n.ratio / n.inputs_ratio if n.inputs_ratio > 0 else math.inf)
        mismatch.note = (
            f"the error grows gradually: no node out of tolerance has {RISE:g}x its inputs' error "
            f"(the largest rise: {worst.describe()}, {_rise(worst)})"
        )
    else:
        mismatch.note = (
            f"none of the {len(found)} compared nodes leaves tolerance when traced; the difference may come "
            "from the runtime's optimised run (a delegate, fused kernels) or from nodes fwx could not pair"
            if found
            else "no artifact tensor could be paired with a reference tensor"
        )
    return mismatch


def _rise(node: NodeError) -> str:
    return "its inputs are exact" if node.inputs_ratio <= 0 else f"{node.ratio / node.inputs_ratio:.3g}x its inputs'"


def _comparable(pr: Pair, ref: Trace, cand: Trace) -> bool:
    values = [ref[r][1] for r in pr.refs] + [cand[pr.cand][1]]
    return all(v.dtype.kind in "fiub" for v in values)


def _judge(
    pr: Pair,
    ref_probes: Sequence[Probe],
    cand_probes: Sequence[Probe],
    ref_traces: Sequence[Trace],
    cand_traces: Sequence[Trace],
    precision: str,
    policy: Policy,
) -> NodeError | None:
    """The pair's error over every traced sample; of the reference tensors it may equal, the closest."""
    best: NodeError | None = None
    for r in pr.refs:
        refs, cands = [], []
        for ref, cand in zip(ref_traces, cand_traces, strict=True):
            aligned = align(ref[r][1], cand[pr.cand][1])
            if aligned is None:
                break
            refs.append(ref[r][1].astype(np.float64).ravel())
            cands.append(aligned.astype(np.float64).ravel())
        else:
            node = _scored(
                np.concatenate(refs), np.concatenate(cands), ref_probes[r], cand_probes[pr.cand], precision, policy
            )
            if best is None or node.ratio < best.ratio:
                best = node
    return best


def _scored(ref: np.ndarray, cand: np.ndarray, rp: Probe, cp: Probe, precision: str, policy: Policy) -> NodeError:
    """One pair judged as the policy judges an output (an intermediate tensor has no per-output override)."""
    tol = policy.tolerance(precision, "")
    finite = np.isfinite(ref) & np.isfinite(cand)
    m = metrics(ref[finite], cand[finite], tol.rtol if tol is not None else 0.0)
    if tol is not None:
        tol = tol.at(m["scale"])
        ratio = m["min_atol"] / tol.atol if tol.atol > 0 else (math.inf if m["min_atol"] > 0 else 0.0)
        allowed = str(tol)
    else:  # INT8 without an explicit tolerance: judged by cosine, as its outputs are
        floor = 1.0 - policy.int8_min_cosine
        ratio = (1.0 - m["cosine"]) / floor if floor > 0 else (math.inf if m["cosine"] < 1 else 0.0)
        allowed = f"cosine >= {policy.int8_min_cosine}"
    if np.any(np.isfinite(ref) & ~np.isfinite(cand)):
        ratio = math.inf
    origin = cp.scope or rp.scope  # the artifact's own record first: a fused node keeps its first layer's name
    return NodeError(cp.node, cp.op, cp.tensor, origin, rp.node, m["max_abs"], m["cosine"], max(ratio, 0.0), allowed)


#: Channels-last -> first and back, per rank: converters to TF move images to NHWC inside the graph.
_PERMS: dict[int, list[tuple[int, ...]]] = {
    3: [(0, 2, 1)],
    4: [(0, 3, 1, 2), (0, 2, 3, 1)],
    5: [(0, 4, 1, 2, 3), (0, 2, 3, 4, 1)],
}


def align(ref: np.ndarray, cand: np.ndarray) -> np.ndarray | None:
    """``cand`` in ``ref``'s shape: as is, moved between channels-first and -last, or with 1-dims dropped."""
    if cand.shape == ref.shape:
        return cand
    if cand.size != ref.size:
        return None
    for perm in _PERMS.get(cand.ndim, []):
        if cand.ndim == ref.ndim and cand.transpose(perm).shape == ref.shape:
            return cand.transpose(perm)
    if [d for d in cand.shape if d != 1] == [d for d in ref.shape if d != 1]:
        return cand.reshape(ref.shape)
    return None


def _first_confirmed(layers: Sequence[NodeError], cand: Sequence[Probe]) -> NodeError | None:
    """The first node out of tolerance whose next compared node downstream is out of tolerance too."""
    by_tensor = {p.tensor: i for i, p in enumerate(cand)}
    position = [by_tensor.get(n.tensor, -1) for n in layers]
    for k, node in enumerate(layers):
        if node.passed or node.ratio <= RISE * node.inputs_ratio:
            continue
        later = _downstream(position[k], cand)
        nxt = next((n for n, pos in zip(layers[k + 1 :], position[k + 1 :], strict=True) if pos in later), None)
        if nxt is None or not nxt.passed:
            return node
    return None


def _downstream(start: int, cand: Sequence[Probe]) -> set[int]:
    """Positions of artifact tensors computed from the one at ``start`` (all later ones without graph info)."""
    if start < 0 or not any(p.inputs for p in cand):
        return set(range(start + 1, len(cand)))
    reached, out = {cand[start].tensor}, set()
    for i in range(start + 1, len(cand)):
        if any(t in reached for t in cand[i].inputs):
            reached.add(cand[i].tensor)
            out.add(i)
    return out
