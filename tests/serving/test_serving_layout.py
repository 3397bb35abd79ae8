"""Inside fwx.serving: transports sit on top of the data plane, never the other way, and never on each other."""

from __future__ import annotations

import ast
from pathlib import Path

import fwx.serving

ROOT = Path(fwx.serving.__file__).parent
TRANSPORTS = ("fwx.serving.rest", "fwx.serving.grpc")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def _module(path: Path) -> str:
    return ".".join(("fwx", "serving", *path.relative_to(ROOT).with_suffix("").parts))


def test_only_the_process_lifecycle_imports_a_transport() -> None:
    for path in ROOT.rglob("*.py"):
        mod = _module(path)
        if mod.startswith(TRANSPORTS) or mod.startswith("fwx.serving.proto") or mod == "fwx.serving.server":
            continue
        bad = sorted(i for i in _imports(path) if i.startswith(TRANSPORTS))
        assert not bad, f"{mod} imports the transport(s) {bad}"


def test_transports_do_not_import_each_other() -> None:
    for path in ROOT.rglob("*.py"):
        mod = _module(path)
        for own, other in (TRANSPORTS, TRANSPORTS[::-1]):
            if mod.startswith(own):
                bad = sorted(i for i in _imports(path) if i.startswith(other))
                assert not bad, f"{mod} imports {bad}"


def test_subpackages_exist_without_prefixed_names() -> None:
    for sub in ("rest", "grpc", "batching"):
        names = [p.stem for p in (ROOT / sub).glob("*.py")]
        assert "__init__" in names
        assert not [n for n in names if n.startswith(f"{sub}_")], names
