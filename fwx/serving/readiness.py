"""What blocks readiness, in words, and what a repository path must look like before serving it.

``fwx serve`` logs "ready" only when ``/v2/health/ready`` answers 200; otherwise
it names each model version that blocks readiness and why (a failed load, a
format excluded by ``--only-formats``, ...). A path that is a model or version
folder, or a folder with no model in it, is refused before anything listens:
serving it would start "ready" with nothing served.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fwx.decimal_text import is_digits
from fwx.errors import UsageError
from fwx.manifest import MANIFEST_NAME
from fwx.repository import TMP_PREFIX

if TYPE_CHECKING:
    from fwx.serving.models import ModelManager


def readiness_blockers(manager: ModelManager) -> list[str]:
    """One line per model version that keeps the server from being ready (empty when ready)."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for row in manager.index():
        rows.setdefault(row["name"], []).append(row)
    out = []
    for name in manager.models():
        if manager.versions(name):
            continue
        for row in rows.get(name, []):
            if row["state"] in ("FAILED", "LOADING"):
                out.append(f"model {name} v{row['version']} {row['state'].lower()}: {row['reason']}")
    return out


def _is_version_dir(path: Path) -> bool:
    return path.is_dir() and is_digits(path.name) and (path / MANIFEST_NAME).is_file()


def _versions(model_dir: Path) -> list[Path]:
    try:
        return [p for p in model_dir.iterdir() if _is_version_dir(p)]
    except OSError:
        return []


def _suggest(given: Path, levels: int) -> str:
    """The folder ``levels`` up from ``given``, spelt as the user would: relative unless given absolute."""
    up = given.resolve().parents[levels - 1]
    text = str(up) if given.is_absolute() else os.path.relpath(up)
    return text.rstrip("/") + "/"


def check_repository(path: Path) -> None:
    """UsageError (exit 2) unless ``path`` is a repository with at least one model version in it."""
    path = Path(path)
    if not path.is_dir():
        raise UsageError(f"{path} is not a folder", hint="pass the artifact repository, e.g. fwx serve artifacts/")
    shown = str(path).rstrip("/") or "/"
    if (path / MANIFEST_NAME).is_file():
        root = _suggest(path, 2)
        raise UsageError(
            f"{shown} is one model version, not a repository",
            hint=f"did you mean {root}? (fwx serve takes the folder that holds the model folders)",
        )
    if _versions(path):
        root = _suggest(path, 1)
        raise UsageError(
            f"{shown} is one model's folder, not a repository",
            hint=f"did you mean {root}? (fwx serve takes the folder that holds the model folders)",
        )
    models = [
        p for p in sorted(path.iterdir()) if p.is_dir() and not p.name.startswith((".", TMP_PREFIX)) and _versions(p)
    ]
    if not models:
        raise UsageError(
            f"{shown} holds no model (no <model>/<version>/{MANIFEST_NAME} inside)",
            hint="export one first (fwx export MODEL --out " + shown + ") or pass the right folder",
        )
