"""Nothing outside the boundary opens a model path the user named: the code is walked and checked.

The copying layer (``fwx.safety.snapshot``'s ``take``/``register``/``taken``,
``fdcopy``, ``beneath``, ``hf_fileset``) is reached only through
``fwx.sources.boundary``; each other caller is listed here with its reason. The
command modules, which hold the values click parsed from the command line, call
nothing that opens, lists, detects or hashes a path: they hand the ``Admitted``
value (or its copy) on. A new caller fails this test until it is routed through
``boundary.admit`` or listed with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import fwx

PACKAGE = Path(fwx.__file__).parent

#: The copying layer: a dotted name, or a module whose every name is guarded.
GUARDED = (
    "fwx.safety.snapshot.take",
    "fwx.safety.snapshot.register",
    "fwx.safety.snapshot.taken",
    "fwx.safety.fdcopy",
    "fwx.safety.beneath",
    "fwx.safety.hf_fileset",
)
#: module -> the guarded names it may use, and why.
ALLOWED: dict[str, tuple[set[str], str]] = {
    "fwx.sources.boundary": (
        {"fwx.safety.snapshot.register", "fwx.safety.snapshot.taken"},
        "the boundary itself: admit() takes the one copy",
    ),
}
#: The copying layer's own modules use each other freely.
LAYER = {"fwx.safety.snapshot", "fwx.safety.fdcopy", "fwx.safety.beneath", "fwx.safety.hf_fileset"}
#: Calls that open, list, stat, detect or hash a path: none in a command module.
OPENERS = {
    "open",
    "read_bytes",
    "read_text",
    "iterdir",
    "glob",
    "rglob",
    "walk",
    "scandir",
    "listdir",
    "detect_format",
    "sha256_path",
    "load_source",
    "register",
    "take",
    "admit",  # the loader admits (fwx.commands.sandboxing); a command receives the value
}
#: (command module, function) pairs that may call one of OPENERS, and why.
COMMAND_CALLS: dict[tuple[str, str], str] = {
    ("fwx.commands.sandboxing", "_snap"): "the loader's one call of boundary.admit for each model parameter",
}


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(p for p in rel.parts if p != "__init__")
        out[name] = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return out


def _aliases(tree: ast.Module, module: str) -> dict[str, str]:
    """Local name -> the dotted name it stands for, from every import in the module (at any depth)."""
    names: dict[str, str] = {}
    package = module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], base]).strip(".")
            for a in node.names:
                names[a.asname or a.name] = f"{base}.{a.name}"
    return names


def _dotted(node: ast.expr, names: dict[str, str]) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in names:
        return ".".join([names[node.id], *reversed(parts)])
    return None


def _guarded(dotted: str) -> str | None:
    return next((g for g in GUARDED if dotted == g or dotted.startswith(g + ".")), None)


def _uses(tree: ast.Module, module: str) -> set[str]:
    """Every guarded name the module refers to (as an import or in an expression)."""
    names = _aliases(tree, module)
    found = {g for dotted in names.values() if (g := _guarded(dotted))}
    found -= {"fwx.safety.snapshot"}  # importing the module is fine; its guarded functions are checked below
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute | ast.Name):
            dotted = _dotted(node, names)
            if dotted is not None and (g := _guarded(dotted)):
                found.add(g)
    return found


def test_only_the_boundary_reaches_the_copying_layer() -> None:
    mods = _modules()
    wrong = {}
    for module, tree in mods.items():
        if module in LAYER:
            continue
        allowed = ALLOWED.get(module, (set(), ""))[0]
        extra = _uses(tree, module) - allowed
        if extra:
            wrong[module] = sorted(extra)
    assert not wrong, f"route these through fwx.sources.boundary.admit (or list them with a reason): {wrong}"
    for module, (allowed, _) in ALLOWED.items():  # the list stays true: every entry is still used
        assert _uses(mods[module], module) == allowed, module


def test_no_command_module_opens_a_path_it_was_given() -> None:
    calls: dict[tuple[str, str], list[str]] = {}
    for module, tree in _modules().items():
        if not module.startswith("fwx.commands.") and module != "fwx.cli":
            continue
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Call):
                    f = node.func
                    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                    if name in OPENERS:
                        calls.setdefault((module, fn.name), []).append(f"{name} (line {node.lineno})")
    wrong = {k: v for k, v in calls.items() if k not in COMMAND_CALLS}
    assert not wrong, f"a command opens a path itself; take the Admitted value instead: {wrong}"
    assert set(COMMAND_CALLS) <= set(calls), "an allowed call is gone: drop it from COMMAND_CALLS"


def test_the_walk_sees_a_caller_it_must_refuse() -> None:
    """The checker itself: a module calling snapshot.take or fdcopy directly is caught, however imported."""
    for source in (
        "from fwx.safety import snapshot\ndef f(p):\n    return snapshot.take(p)\n",
        "from fwx.safety.snapshot import register as r\ndef f(p):\n    return r(p)\n",
        "import fwx.safety.fdcopy\ndef f(p):\n    return fwx.safety.fdcopy.Folder.open(p)\n",
        "from ..safety import beneath\ndef f(fd):\n    return beneath.open_beneath(fd, 'x')\n",
    ):
        assert _uses(ast.parse(source), "fwx.sources.example"), source
    assert not _uses(ast.parse("from fwx.safety import snapshot\nx = snapshot.display('t')\n"), "fwx.sources.x")
