"""Refuse to publish a new version whose interface differs from the model's previous version.

``--name`` defaults to the source's stem, so ``model.keras``, ``model.pt2`` and
``model.onnx`` would all become versions of one model "model" with different
inputs, and ``latest`` would serve whichever came last. A version is meant to be
a drop-in replacement: same tensor names, dtypes, ranks, static dims and layout.
"""

from __future__ import annotations

from fwx import ui
from fwx.errors import InputError
from fwx.manifest import Manifest, SourceInfo
from fwx.repository import Repository
from fwx.signature import Signature, TensorSpec


def _tensors(specs: tuple[TensorSpec, ...]) -> str:
    # shape_text spells every dynamic dim by its axis, so N and batch (or s40) compare equal
    return ", ".join(str(s) for s in specs) or "none"


def _layouts(manifest: Manifest) -> set[str]:
    return {e.layout.upper() for e in manifest.artifacts.values() if e.layout}


def interface_changes(previous: Manifest, new: Manifest) -> list[str]:
    """What a client of ``previous`` would notice in ``new`` (dynamic dims compare equal whatever their symbol)."""
    old_sig, new_sig = Signature.from_json(previous.signature), Signature.from_json(new.signature)
    changes = []
    for side in ("inputs", "outputs"):
        before, after = _tensors(getattr(old_sig, side)), _tensors(getattr(new_sig, side))
        if before != after:
            changes.append(f"{side} {before} -> {after}")
    old_layout, new_layout = _layouts(previous), _layouts(new)
    if old_layout and new_layout and old_layout != new_layout:
        changes.append(f"layout {'/'.join(sorted(old_layout))} -> {'/'.join(sorted(new_layout))}")
    return changes


def check_new_version(repo: Repository, manifest: Manifest, *, allow: bool) -> None:
    """Raise (or, with ``allow``, warn) when ``manifest`` changes the interface of the model's latest version.

    Called twice: with the pinned signature before any conversion (so a collision
    costs no export time), and with the artifacts' layouts right before publish.
    """
    versions = repo.versions(manifest.name)
    if not versions:
        return
    previous = repo.manifest(manifest.name, versions[-1])
    changes = interface_changes(previous, manifest)
    if not changes:
        return
    where = f"{manifest.name}/{versions[-1]}"
    if allow and not manifest.artifacts:
        return  # the early check; the one before publish warns once
    line = f"the new version of {manifest.name!r} changes its interface ({'; '.join(changes)}) vs {where}"
    if allow:
        ui.warn(line + "; publishing anyway (--allow-signature-change)")
        return
    raise InputError(
        line + "; nothing published",
        hint=f"give it its own --name (the default is the file's stem), or pass --allow-signature-change "
        f"if it really replaces {where}",
    )


def check_pinned(repo: Repository, name: str, signature: Signature, *, allow: bool) -> None:
    """The early check, before any conversion: the pinned signature against the latest version's."""
    probe = Manifest(name=name, version=0, source=SourceInfo("", "", "", ""), signature=signature.to_json())
    check_new_version(repo, probe, allow=allow)


def published_line(manifest: Manifest) -> str:
    return f"published as {manifest.name}/{manifest.version}"
