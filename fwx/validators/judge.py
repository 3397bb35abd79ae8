"""``validate_runtimes``: run a reference and candidates on the same inputs and judge the diffs.

Order of work (never raises while measuring): draw inputs; run the reference
on every sample; for each candidate check its signature against the pinned
one, run every sample (a crash is a failure row, the rest still run), compare
every output, then apply the policy. All failures land in the report.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fwx.errors import first_line
from fwx.runtimes.base import Runtime
from fwx.signature import Signature, is_dynamic
from fwx.sources.samples import InputConfig, generate_inputs
from fwx.validators.compare import OutputAccumulator
from fwx.validators.layout import inputs_to, output_back, shape_to
from fwx.validators.masking import hide_padding
from fwx.validators.policy import Policy, computed_in
from fwx.validators.report import ArtifactResult, OutputResult, ValidationReport

Sample = dict[str, np.ndarray]


def _one_line(exc: BaseException) -> str:
    first = first_line(exc)
    return first if first == type(exc).__name__ else f"{type(exc).__name__}: {first}"


def _describe(sample: Mapping[str, np.ndarray]) -> dict[str, Any]:
    return {k: {"shape": list(v.shape), "dtype": v.dtype.name} for k, v in sample.items()}


def _shapes(sample: Mapping[str, np.ndarray]) -> str:
    return ", ".join(f"{k}{list(v.shape)}" for k, v in sample.items())


def check_signature(
    pinned: Signature, cand: Signature, *, layout: str | None, ref_layout: str | None, resizable: bool = False
) -> tuple[dict[str, str] | None, list[str], list[str]]:
    """Map pinned input names to the candidate's, plus (errors, notes) about the signature itself."""
    errors: list[str] = []
    notes: list[str] = []
    cand_names = cand.input_names
    if set(pinned.input_names) <= set(cand_names) and len(cand_names) == len(pinned.inputs):
        mapping = {n: n for n in pinned.input_names}
    elif len(cand_names) == len(pinned.inputs):
        mapping = dict(zip(pinned.input_names, cand_names, strict=True))
        errors.append(f"input names {cand_names} differ from the pinned {pinned.input_names} (fed by position)")
    else:
        errors.append(f"takes inputs {cand_names}, the pinned signature has {pinned.input_names}")
        return None, errors, notes
    for spec in pinned.inputs:
        cspec = cand.input(mapping[spec.name])
        if _kind(spec.dtype) != _kind(cspec.dtype):
            errors.append(f"input {spec.name!r} is {cspec.dtype} in the artifact, pinned {spec.dtype}")
        shape = shape_to(cspec.shape, layout, ref_layout)
        if len(shape) != len(spec.shape):
            if cspec.shape:  # rank 0 means "unknown" (TorchScript without a hint)
                errors.append(f"input {spec.name!r} has rank {len(shape)} in the artifact, pinned {len(spec.shape)}")
            continue
        for axis, (p, c) in enumerate(zip(spec.shape, shape, strict=True)):
            if is_dynamic(p) and isinstance(c, int) and c >= 0:
                msg = f"input {spec.name!r} axis {axis} is fixed to {c} in the artifact but dynamic ({p}) when pinned"
                (notes if resizable else errors).append(msg)
    return mapping, errors, notes


def _kind(dtype: str) -> str:
    return (
        "f"
        if dtype in ("float16", "float32", "float64", "bfloat16")
        else ("b" if dtype == "bool" else ("s" if dtype == "bytes" else "i"))
    )


def _run_reference(
    reference: Runtime,
    samples: Sequence[Sample],
    report: ValidationReport,
) -> list[dict[str, np.ndarray] | None]:
    outs: list[dict[str, np.ndarray] | None] = []
    for i, sample in enumerate(samples):
        try:
            outs.append(reference.infer(dict(sample)))
        except Exception as exc:  # noqa: BLE001 - a crash is a result, not an abort
            report.errors.append(f"sample {i} ({_shapes(sample)}): the reference failed: {_one_line(exc)}")
            outs.append(None)
    return outs


def _pair_outputs(ref: Mapping[str, np.ndarray], cand: Mapping[str, np.ndarray], errors: list[str]) -> dict[str, str]:
    """Reference output name -> candidate output name (by name, else by position with an error)."""
    if set(ref) <= set(cand):
        return {n: n for n in ref}
    if len(ref) == len(cand):
        msg = f"output names {list(cand)} differ from the reference's {list(ref)} (compared by position)"
        if msg not in errors:
            errors.append(msg)
        return dict(zip(ref, cand, strict=True))
    msg = f"returns outputs {list(cand)}, the reference {list(ref)}"
    if msg not in errors:
        errors.append(msg)
    return {n: n for n in ref if n in cand}


def _measure(
    key: str,
    rt: Runtime,
    *,
    signature: Signature,
    samples: Sequence[Sample],
    ref_outs: Sequence[dict[str, np.ndarray] | None],
    precision: str,
    layout: str | None,
    ref_layout: str | None,
    policy: Policy,
    labels: Sequence[np.ndarray | None] | None,
    masks: frozenset[str] | None = None,
) -> ArtifactResult:
    res = ArtifactResult(
        key=key,
        format=str(rt.format),
        precision=precision,
        layout=layout,
        provider=rt.provider,
        runtime_version=rt.runtime_version,
        notes=list(getattr(rt, "notes", [])),
    )
    mapping, errors, notes = check_signature(
        signature, rt.signature(), layout=layout, ref_layout=ref_layout, resizable=str(rt.format) == "tflite"
    )
    res.errors += errors
    res.notes += notes
    if mapping is None:
        return res
    ref_names = next((list(o) for o in ref_outs if o is not None), signature.output_names)
    accs = {n: OutputAccumulator(n) for n in ref_names}
    times = []
    for i, (sample, ref) in enumerate(zip(samples, ref_outs, strict=True)):
        if ref is None:
            continue
        feed = inputs_to({mapping[k]: v for k, v in sample.items() if k in mapping}, ref_layout, layout)
        try:
            t0 = time.perf_counter()
            out = rt.infer(feed)
            times.append(time.perf_counter() - t0)
        except Exception as exc:  # noqa: BLE001 - one crash is one failure row; keep measuring
            res.errors.append(f"sample {i} ({_shapes(sample)}): crashed: {_one_line(exc)}")
            continue
        pairs = _pair_outputs(ref, out, res.errors)
        lab = labels[i] if labels is not None and i < len(labels) else None
        for rname, cname in pairs.items():
            cand = output_back(np.asarray(out[cname]), ref[rname].shape, layout, ref_layout)
            accs[rname].add(*hide_padding(np.asarray(ref[rname]), cand, sample, masks), i, lab)
    res.mean_ms = 1000 * float(np.mean(times)) if times else None
    for acc in accs.values():
        res.outputs.append(_judge(acc, precision, policy, measured=bool(acc.refs or acc.problems or acc.strings)))
    return res


def _judge(acc: OutputAccumulator, precision: str, policy: Policy, *, measured: bool) -> OutputResult:
    precision = computed_in(precision, {acc.ref_dtype, *acc.dtypes}) or precision
    m = acc.result(policy.rtol_for(precision, acc.name))
    reasons = list(acc.problems)
    if not measured:
        reasons.append("no sample produced this output")
    elif acc.refs:
        reasons += policy.judge(m, precision, acc.name)
        if _kind(m["ref_dtype"]) != _kind(m["dtype"].split(",")[0]):
            reasons.append(f"dtype {m['dtype']}, reference {m['ref_dtype']}")
    return OutputResult(acc.name, m, policy.applied(precision, acc.name, m), reasons)


def validate_runtimes(
    reference: Runtime,
    candidates: Mapping[str, Runtime],
    *,
    signature: Signature,
    precisions: Mapping[str, str] | None = None,
    layouts: Mapping[str, str | None] | None = None,
    reference_layout: str | None = None,
    inputs: Sequence[dict[str, np.ndarray]] | None = None,
    policy: Policy | None = None,
    seed: int = 0,
    labels: Sequence[np.ndarray | None] | None = None,
    input_config: InputConfig | None = None,
    reference_key: str | None = None,
) -> ValidationReport:
    """Compare every candidate with ``reference`` on the same inputs; see the module docstring.

    ``inputs`` are in the pinned signature's layout (= ``reference_layout``);
    ``labels`` (aligned with ``inputs``) turn the int8 verdict into an accuracy check.
    """
    policy = policy or Policy()
    precisions, layouts = precisions or {}, layouts or {}
    report = ValidationReport(
        reference={
            "key": reference_key or str(reference.format),
            "format": str(reference.format),
            "provider": reference.provider,
            "runtime_version": reference.runtime_version,
            "layout": reference_layout,
        },
        artifacts=[],
        seed=seed,
        device=reference.device,
    )
    cfg = input_config or InputConfig(seed=seed)
    try:  # given inputs (tiled examples) take the real samples too; generated ones already hold them
        samples = [*inputs, *(dict(d) for d in cfg.data)] if inputs is not None else generate_inputs(signature, cfg)
    except Exception as exc:  # noqa: BLE001
        report.errors.append(f"cannot build inputs: {_one_line(exc)}")
        return report
    report.notes += [f"samples: {name}: {how}" for name, how in cfg.notes.items()]
    report.inputs = [_describe(s) for s in samples]
    ref_outs = _run_reference(reference, samples, report)
    for key, rt in candidates.items():
        try:
            res = _measure(
                key,
                rt,
                signature=signature,
                samples=samples,
                ref_outs=ref_outs,
                precision=precisions.get(key, "fp32"),
                layout=layouts.get(key, reference_layout),
                ref_layout=reference_layout,
                policy=policy,
                labels=labels,
                masks=cfg.masks,
            )
        except Exception as exc:  # noqa: BLE001 - never raise while measuring
            res = ArtifactResult(key=key, format=str(getattr(rt, "format", "?")), precision=precisions.get(key, "fp32"))
            res.errors.append(f"validation crashed: {_one_line(exc)}")
        report.artifacts.append(res)
    return report
