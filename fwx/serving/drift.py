"""Version drift: the serving runtime differs from the one the artifact was made or validated with.

Numbers can shift between runtime releases (a new kernel, a changed default),
so a version that validated under onnxruntime 1.18 deserves a warning when it
is served by 1.31. Only a warning: refusing would make upgrades impossible.
"""

from __future__ import annotations

from typing import Any

from fwx.formats import Format
from fwx.manifest import Manifest


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def _recorded(manifest: Manifest, fmt: Format, package: str) -> str:
    """The version of ``package`` fwx.json recorded for this format's artifact, if any."""
    want = _norm(package)
    for entry in manifest.artifacts.values():
        if entry.format != fmt.value:
            continue
        places: list[dict[str, Any]] = [entry.tool_versions, entry.validation.get("tool_versions") or {}]
        for place in places:
            for key, value in place.items():
                if _norm(str(key)) == want and value:
                    return str(value)
        recorded = str(entry.validation.get("runtime_version") or "")
        if recorded and _norm(recorded.split()[0]) == want:
            return recorded.split()[-1]
    src = manifest.source
    if _norm(src.framework) == want:
        return src.framework_version
    return ""


def drift_versions(manifest: Manifest, fmt: Format, runtime_version: str) -> tuple[str, str, str] | None:
    """(package, recorded version, serving version), or None when fwx.json recorded none to compare."""
    parts = runtime_version.split()
    if len(parts) < 2:
        return None
    package, serving = parts[0], parts[-1]
    recorded = _recorded(manifest, fmt, package)
    if not recorded:
        return None
    return package, recorded, serving


def version_drift(manifest: Manifest, fmt: Format, runtime_version: str) -> str | None:
    """A one-line warning when the serving runtime's version differs from the recorded one, else None."""
    found = drift_versions(manifest, fmt, runtime_version)
    if found is None or found[1] == found[2]:
        return None
    package, recorded, serving = found
    return (
        f"model {manifest.name} v{manifest.version} ({fmt}) was recorded with {package} {recorded} "
        f"but is served by {package} {serving}; outputs may differ slightly (re-validate with fwx validate)"
    )
