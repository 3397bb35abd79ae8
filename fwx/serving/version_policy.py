"""Which versions of a model to serve: ``latest``, ``latest:N``, ``all``, ``specific:1,3``.

Same vocabulary as Triton's and TF Serving's ``version_policy``. The policy is
applied to the versions that are *loadable* (complete and not known to fail),
so a broken newest version leaves the previous one serving.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fwx.errors import UsageError

_HINT = "use latest, latest:N, all or specific:1,3"


@dataclass(frozen=True)
class VersionPolicy:
    """``kind`` is "latest", "all" or "specific"; ``count`` for latest, ``versions`` for specific."""

    kind: str = "latest"
    count: int = 1
    versions: tuple[int, ...] = ()

    def select(self, available: Iterable[int]) -> list[int]:
        """The versions to serve out of ``available``, ascending."""
        avail = sorted(set(available))
        if self.kind == "all":
            return avail
        if self.kind == "specific":
            return [v for v in avail if v in self.versions]
        return avail[-self.count :] if avail else []

    def __str__(self) -> str:
        if self.kind == "latest":
            return "latest" if self.count == 1 else f"latest:{self.count}"
        if self.kind == "specific":
            return "specific:" + ",".join(str(v) for v in self.versions)
        return self.kind


def parse_version_policy(text: str) -> VersionPolicy:
    """Parse a ``--version-policy`` value; raises ``UsageError`` with the accepted forms."""
    raw = text.strip().lower()
    if raw == "all":
        return VersionPolicy("all")
    if raw == "latest":
        return VersionPolicy("latest", 1)
    m = re.fullmatch(r"latest:(\d+)", raw)
    if m:
        n = int(m.group(1))
        if n < 1:
            raise UsageError(f"version policy {text!r} keeps no version", hint=_HINT)
        return VersionPolicy("latest", n)
    m = re.fullmatch(r"specific:([\d,\s]+)", raw)
    if m:
        nums = [p.strip() for p in m.group(1).split(",") if p.strip()]
        if nums and all(re.fullmatch(r"[1-9]\d*", p) for p in nums):
            return VersionPolicy("specific", versions=tuple(sorted({int(p) for p in nums})))
    raise UsageError(f"invalid version policy {text!r}", hint=_HINT)


def policy_for(
    model: str, default: str | VersionPolicy, per_model: Mapping[str, str | VersionPolicy] | None = None
) -> VersionPolicy:
    """The policy of one model: its override if any, else the server default."""
    chosen = (per_model or {}).get(model, default)
    return chosen if isinstance(chosen, VersionPolicy) else parse_version_policy(chosen)
