"""Turn the attempts of an export into ``fwx.json``: one complete entry per target.

Each entry records the path taken (every hop with its tool, version and time),
the signature as read back from the written file, the validation verdict, the
tool versions, and why earlier paths were passed over.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fwx.converters.base import edge_class
from fwx.errors import FwxError, UnsupportedOpsError
from fwx.exporter.readback import as_pinned, in_layout
from fwx.exporter.runner import WORK, Attempt, HopRun, RunContext
from fwx.formats import ARTIFACT_NAMES, Format
from fwx.frameworks import EXTRAS, version_of
from fwx.manifest import ArtifactEntry, Hop, Manifest, SourceInfo, sha256_path, size_of
from fwx.quantize.budget import BudgetMissedError
from fwx.safety.snapshot import companions, original
from fwx.signature import Signature
from fwx.sources.load import LoadedSource
from fwx.sources.samples import hints_to_json

INTERMEDIATE = "intermediate"


def choose(attempts: list[Attempt]) -> tuple[Attempt | None, list[str]]:
    """The first attempt that passed; else the first that produced a validated-but-failing artifact.

    Returns it with its failure lines (empty when it passed) and notes on every
    other path tried.
    """
    pick = next((a for a in attempts if a.passed), None)
    if pick is None:
        pick = next((a for a in attempts if a.error is None and a.report is not None), None)
    if pick is None:
        return None, []
    pick.notes = [f"path: {pick.plan.describe()}"]
    for other in attempts:
        if other is not pick:
            why = other.error.message if other.error else "; ".join(other.report.failures()[:3])
            pick.notes.append(f"passed over {other.plan.describe()}: {why}")
    return pick, ([] if pick.passed else pick.report.failures())


def telling_error(attempts: list[Attempt]) -> FwxError | None:
    """The failure that says most about why no path made an artifact: the one that got furthest (most hops
    done), the preferred (earlier) path on a tie. The first path's failure is often only that it cannot apply
    (torch.export refuses every TorchScript module), while a fallback that converted a hop before failing
    names what stands in the way; when neither got anywhere, the preferred path's reason is the one that
    matters (the TorchScript ONNX exporter naming the op opset 10 lacks, not the dynamo exporter's floor).
    Paths that failed at the same converter say the same thing: the first of them speaks (a converter that
    crashed in the prefetch process, not its in-process rerun down a longer path). When the preferred path
    itself names the model's ops the target cannot express, that list is the answer (TFLite's missing
    MatrixDeterminant, not the detour through ONNX failing on the same op under another name)."""
    failed = [(i, a) for i, a in enumerate(attempts) if a.error is not None]
    if not failed:
        return None
    missed = [(a, a.error) for _, a in failed if isinstance(a.error, BudgetMissedError)]
    if len(missed) > 1 and len(missed) == len(failed):
        return _closest_budget(missed)
    if isinstance(attempts[0].error, UnsupportedOpsError):
        return attempts[0].error  # the preferred path names the model's ops the target cannot express
    best = max(failed, key=lambda f: (len(f[1].hops), -f[0]))[1]
    edge = _failed_edge(best)
    first = next((a for _, a in failed if edge is not None and _failed_edge(a) == edge), best)
    return first.error


def _closest_budget(missed: list[tuple[Attempt, BudgetMissedError]]) -> FwxError:
    """Every graph tried missed the INT8 budget: the one that came closest speaks, naming its graph and what each
    other graph reached (a refusal quoting the preferred graph's 0.56 while another reached 0.28 misleads)."""
    closest, err = min(missed, key=lambda m: m[1].miss)  # the preferred (earlier) graph on a tie
    others = "; ".join(f"{a.plan.describe()}: {e.best}" for a, e in missed if a is not closest)
    err.message = f"{err.message}, on the graph of {closest.plan.describe()} (the closest; also tried: {others})"
    err.args = (err.message,)
    return err


def _failed_edge(attempt: Attempt) -> object | None:
    """The converter an attempt failed in (None when its hops all ran and a later check failed)."""
    done = len(attempt.hops)
    return attempt.plan.hops[done] if done < len(attempt.plan.hops) else None


def build_manifest(
    name: str,
    src: LoadedSource,
    sig: Signature,
    chosen: dict[Format, Attempt],
    ctx: RunContext,
    *,
    keep_intermediate: bool,
    command: str,
    created: str,
    fwx_version: str,
    skipped: dict[str, str] | None = None,
) -> Manifest:
    source = SourceInfo(
        path=str(original(src.path).resolve()) if src.path else src.kind,  # as the user named it
        sha256=src.sha256,
        format=src.format.value,
        framework=src.framework,
        framework_version=src.framework_version,
        files={name: sha256_path(p) for name, p in companions(src.path).items()} if src.path else {},
    )
    moved: dict[Path, Path] = {}
    artifacts = {
        fmt.value: _entry(fmt, a, ctx, moved if keep_intermediate else None, fwx_version) for fmt, a in chosen.items()
    }
    return Manifest(
        name=name,
        version=0,
        source=source,
        signature=sig.to_json(),
        artifacts=artifacts,
        command=command,
        created=created,
        fwx_version=fwx_version,
        skipped=dict(skipped or {}),
        samples=hints_to_json(ctx.input_config) if ctx.input_config else {},
        assets=_copy_assets(src, ctx.staging),
        task=src.extras.task or "",  # serving reads it rather than inferring the task again
    )


def _copy_assets(src: LoadedSource, staging: Path) -> dict[str, str]:
    """The source's files a client needs (tokenizer, config), copied into the version and listed by checksum."""
    out: dict[str, str] = {}
    for name, path in src.extras.assets.items():
        shutil.copyfile(path, staging / name)
        out[name] = sha256_path(staging / name)
    return out


def _entry(
    fmt: Format, attempt: Attempt, ctx: RunContext, moved: dict[Path, Path] | None, fwx_version: str
) -> ArtifactEntry:
    res = attempt.result
    path = ctx.staging / ARTIFACT_NAMES[fmt]
    hops = [_hop(h, fmt, ctx, i, last=i == len(attempt.hops) - 1, moved=moved) for i, h in enumerate(attempt.hops)]
    validation = attempt.report.for_artifact(fmt.value) if attempt.report is not None else {"skipped": True}
    files = {name: sha256_path(path.parent / name) for name in res.extra.get("files", [])}
    return ArtifactEntry(
        format=fmt.value,
        path=ARTIFACT_NAMES[fmt],
        sha256=sha256_path(path),
        files=files,
        size_bytes=size_of(path) + sum(size_of(path.parent / name) for name in files),
        precision=res.precision,
        opset=attempt.opset,
        layout=res.layout,
        signature=_read_back(attempt, ctx),
        names=dict(attempt.names),
        hops=hops,
        tool_versions=_tool_versions(attempt, fwx_version),
        validation=validation,
        quantization=dict(res.extra.get("quantization") or {}),
        status="ok" if attempt.passed else "failed",
        notes=[
            *attempt.notes,
            *res.notes,
            *([f"static shapes (--static-shapes): {ctx.expected}"] if ctx.options.static_shapes else []),
        ],
    )


def _read_back(attempt: Attempt, ctx: RunContext) -> dict[str, Any]:
    """The artifact's signature as read back, its dynamic dims spelled as pinned (one set across formats)."""
    if attempt.readback is None:
        return {}
    layouts = (ctx.layout, attempt.result.layout)
    pinned = in_layout(ctx.expected or ctx.signature, *layouts)
    return as_pinned(pinned, attempt.readback, outputs=layouts[0] == layouts[1]).to_json()


def _hop(
    h: HopRun, fmt: Format, ctx: RunContext, index: int, *, last: bool, moved: dict[Path, Path] | None
) -> dict[str, Any]:
    source = h.entry.source if h.entry else (Format.ONNX if index else ctx.src.format)
    target = h.entry.target if h.entry else fmt
    data: dict[str, Any] = asdict(
        Hop(str(source), str(target), h.result.tool, h.result.tool_version, round(h.seconds, 3))
    )
    if h.entry is not None:
        data["module"] = f"{h.entry.module}:{h.entry.cls}"
    if last:
        return data
    p = h.result.path
    if WORK not in p.parts:  # another target's published artifact
        data["path"] = p.relative_to(ctx.staging).as_posix()
    elif moved is not None:
        if p not in moved:
            dest = ctx.staging / INTERMEDIATE / fmt.value / str(index + 1) / ARTIFACT_NAMES.get(target, target.value)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(p), dest)
            moved[p] = dest
        data["path"] = moved[p].relative_to(ctx.staging).as_posix()
        data["sha256"] = sha256_path(moved[p])
    return data


def _tool_versions(attempt: Attempt, fwx_version: str) -> dict[str, str]:
    versions = {"fwx": fwx_version}
    for h in attempt.hops:
        if h.entry is None:
            continue
        for module, _extra in edge_class(h.entry).requires:
            dist = EXTRAS.get(module, (module, ""))[0]
            versions[dist] = version_of(dist)
    if attempt.runtime_version:
        tool, _, ver = attempt.runtime_version.partition(" ")
        versions[f"{tool} (read-back)"] = ver
    return versions
