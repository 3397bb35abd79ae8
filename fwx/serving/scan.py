"""Find the complete model versions in a repository (runs in a loader thread).

A version is a candidate only if its folder name is a positive integer without
a leading zero and it holds ``fwx.json`` (written last by ``Staging.publish``,
so a half-copied folder is skipped, unlike TF Serving #1086). Whether its
checksums match is decided at load time. Anything else, hidden ``.fwx-tmp-*``
staging folders aside, is logged once per path, not on every poll.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from fwx.manifest import MANIFEST_NAME
from fwx.repository import MODEL_NAME_RE, TMP_PREFIX
from fwx.serving.control import inside
from fwx.serving.fingerprint import Fingerprint, fingerprint

log = logging.getLogger("fwx.serving")

__all__ = ["Fingerprint", "Scanner"]

_VERSION_RE = re.compile(r"[1-9]\d*")


def is_model_folder(root: Path) -> bool:
    """``root/<version>/fwx.json`` exists: one model's folder rather than a repository of models."""
    return root.is_dir() and any(
        _VERSION_RE.fullmatch(p.name) and (p / MANIFEST_NAME).is_file() for p in root.iterdir()
    )


class Scanner:
    """Scans ``root``; remembers what it already complained about.

    With ``model_name`` (``fwx serve --model-name``), a ``root`` whose own
    subfolders are versions (``root/1/fwx.json``: what KServe's storage
    initializer makes of a ``storageUri`` naming one model's folder) is served
    as that one model; a repository root is served as usual.
    """

    def __init__(self, root: Path, model_name: str | None = None) -> None:
        self.root = Path(root)
        self.model_name = model_name
        self._ignored: set[str] = set()

    def single_model(self) -> bool:
        """True when ``root`` is one model's folder to be served as ``model_name``."""
        return bool(self.model_name) and is_model_folder(self.root)

    def model_dir(self, name: str) -> Path:
        return self.root if name == self.model_name and self.single_model() else self.root / name

    def _ignore(self, path: Path, why: str) -> None:
        key = f"{path}:{why}"
        if key not in self._ignored:
            self._ignored.add(key)
            log.warning("ignoring %s: %s", path, why)

    def models(self) -> list[str]:
        """Model folders: valid names, not hidden, realpath inside the repository."""
        if not self.root.is_dir():
            self._ignore(self.root, "model repository does not exist")
            return []
        if self.single_model():
            return [str(self.model_name)]
        names = []
        for p in sorted(self.root.iterdir()):
            if p.name.startswith(".") or not p.is_dir():
                continue
            if not MODEL_NAME_RE.match(p.name):
                self._ignore(p, "not a valid model name ([A-Za-z0-9_.-]{1,128})")
            elif not inside(self.root, p):
                self._ignore(p, "resolves outside the model repository")
            else:
                names.append(p.name)
        return names

    def versions(self, name: str) -> dict[int, Fingerprint]:
        """Complete versions of one model with the fingerprint of their files (``fingerprint``)."""
        folder = self.model_dir(name)
        found: dict[int, Fingerprint] = {}
        if not folder.is_dir():
            return found
        for p in folder.iterdir():
            if p.name.startswith(TMP_PREFIX) or p.name.startswith("."):
                continue
            if not p.is_dir() or not _VERSION_RE.fullmatch(p.name):
                self._ignore(p, "not a version folder (a positive integer without leading zeros)")
                continue
            if not inside(folder, p):
                self._ignore(p, "resolves outside its model folder")
                continue
            try:
                st = (p / MANIFEST_NAME).stat()
            except OSError:
                self._ignore(p, f"no {MANIFEST_NAME} yet (incomplete version)")
                continue
            found[int(p.name)] = fingerprint(p, st)
        return found

    def scan(self) -> dict[str, dict[int, Fingerprint]]:
        return {name: self.versions(name) for name in self.models()}
