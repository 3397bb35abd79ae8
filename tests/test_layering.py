"""The floors of docs/architecture.md, enforced: no import runs upward, no circle between packages.

Every ``import``/``from ... import`` in fwx/ counts, function-local ones
included (a local import that dodges a cycle is still the cycle). A unit is a
subpackage (``fwx.exporter``) or a top-level module (``fwx.signature``).
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import pytest

from fwx.errors import FwxWarning

FWX = Path(__file__).resolve().parent.parent / "fwx"

#: Floors, top to bottom (docs/architecture.md). A unit may import its own floor or any below.
FLOORS: list[set[str]] = [
    {"cli", "commands", "__main__"},
    {"exporter", "serving", "deploy", "docker"},
    {"converters", "validators", "quantize"},
    {"sources"},
    {"runtimes"},
    {"signature", "formats", "manifest", "repository", "safety"},
    {"errors", "ui", "quiet", "frameworks", "decimal_text", "machine", "__init__"},
]
LEVEL = {unit: len(FLOORS) - i for i, floor in enumerate(FLOORS) for unit in floor}


def _unit(module: str) -> str | None:
    """``fwx.exporter.pipeline`` -> ``exporter``; ``fwx`` -> ``__init__``; not fwx -> None."""
    parts = module.split(".")
    if parts[0] != "fwx":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def _module_of(path: Path) -> str:
    rel = path.relative_to(FWX.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    return (FWX / name).is_dir() or (FWX / f"{name}.py").is_file()


def _imports(path: Path) -> list[tuple[str, int]]:
    """(imported fwx module, line) for every import in ``path``; ``from fwx import ui`` names ``fwx.ui``."""
    tree = ast.parse(path.read_text(), str(path))
    here = _module_of(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if base == "fwx":  # ``from fwx import ui`` imports the module; ``__version__`` is the package's own
                out += [(f"fwx.{a.name}" if _is_module(a.name) else "fwx", node.lineno) for a in node.names]
            else:
                out.append((base, node.lineno))
    return [(m, line) for m, line in out if m == "fwx" or m.startswith("fwx.")]


def _edges() -> dict[tuple[str, str], list[str]]:
    """(importer unit, imported unit) -> where, for every import between two different units."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(FWX.rglob("*.py")):
        src = _unit(_module_of(path))
        for module, line in _imports(path):
            dst = _unit(module)
            if src and dst and src != dst:
                edges.setdefault((src, dst), []).append(f"{path.relative_to(FWX.parent)}:{line}")
    return edges


def test_every_unit_has_a_floor() -> None:
    units = {_unit(_module_of(p)) for p in FWX.rglob("*.py")}
    missing = sorted(u for u in units if u and u not in LEVEL)
    assert not missing, f"add {missing} to a floor in docs/architecture.md and here"


def test_no_import_runs_upward() -> None:
    upward = [f"{where[0]}: {src} -> {dst}" for (src, dst), where in _edges().items() if LEVEL[dst] > LEVEL[src]]
    assert not upward, "imports that run up a floor:\n" + "\n".join(upward)


def test_no_cycle_between_units() -> None:
    graph: dict[str, set[str]] = {}
    for src, dst in _edges():
        graph.setdefault(src, set()).add(dst)

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    cycles = sorted({" <-> ".join(sorted((a, b))) for a in graph for b in reach(a) if a != b and a in reach(b)})
    assert not cycles, "units that import each other (directly or around a circle): " + ", ".join(cycles)


def test_the_checker_sees_a_local_upward_import(tmp_path: Path) -> None:
    """A function-local import counts: the check would catch ``converters`` reaching into ``exporter``."""
    fake = FWX / "converters" / "edge.py"
    tree = ast.parse("def f():\n    from fwx.exporter.pinning import x\n")
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))
    assert node.module is not None
    assert LEVEL[_unit(node.module) or ""] > LEVEL[_unit(_module_of(fake)) or ""]


def test_fwx_warnings_fail_tests() -> None:
    """pyproject's filterwarnings turns fwx's own warnings into errors (third-party ones stay warnings)."""
    with pytest.raises(FwxWarning):
        warnings.warn("a warning fwx issued", FwxWarning, stacklevel=1)


def _module_graph() -> dict[str, dict[str, list[str]]]:
    """importer module -> imported module -> where, over every fwx module (generated protobuf code excluded).

    ``from fwx.a import b`` depends on ``fwx.a`` (names are read from it) and, when ``b`` is a
    submodule, on ``fwx.a.b``; ``import fwx.a.b`` depends on ``fwx.a.b``. So a submodule that reads a
    sibling through its package ``__init__`` while that ``__init__`` imports it is a circle.
    """
    modules = {_module_of(p): p for p in sorted(FWX.rglob("*.py")) if "proto" not in p.relative_to(FWX).parts[:2]}
    graph: dict[str, dict[str, list[str]]] = {m: {} for m in modules}
    for here, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        package = here if path.name == "__init__.py" else here.rpartition(".")[0]
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                # the package's namespace is read (its ``__init__`` runs first), and a submodule name is loaded too
                targets = [base, *(f"{base}.{a.name}" for a in node.names)]
            for target in targets:
                if target in modules and target != here:
                    graph[here].setdefault(target, []).append(f"{path.relative_to(FWX.parent)}:{node.lineno}")
    return graph


def _cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_cycle_between_modules() -> None:
    """Inside a package too, modules import downward only: no two modules reach each other."""
    graph = _module_graph()
    report = []
    for component in _cycles(graph):
        members = set(component)
        where = [w for m in component for dst, ws in graph[m].items() if dst in members for w in ws[:1]]
        report.append(" <-> ".join(component) + "\n    " + "\n    ".join(where))
    assert not report, "modules that import each other (directly or around a circle):\n" + "\n".join(report)


def test_the_cycle_finder_finds_a_circle() -> None:
    """The finder is not vacuous: a three-module circle is reported, a chain is not."""
    circle = {"a": {"b": ["x"]}, "b": {"c": ["x"]}, "c": {"a": ["x"]}, "d": {"a": ["x"]}}
    assert _cycles(circle) == [["a", "b", "c"]]
    assert _cycles({"a": {"b": ["x"]}, "b": {}}) == []
