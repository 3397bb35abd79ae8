"""README.md and docs/ say what fwx does: every shell block runs or says why not, links stay inside the
repository, the architecture page matches ``fwx/``, and no development-history wording.

Shell blocks: a fenced ``bash``/``sh``/``shell``/``console`` block, or an untagged one whose first
command is a shell command (``fwx ...``, ``python ...``), must follow a line

* ``<!-- runnable -->``: run here with bash (``-e``: every command must exit 0) in a scratch folder
  holding a copy of the built sample (``samples/build/cnn.pt``); ``fwx`` is this checkout's; or
* ``<!-- not run: REASON -->``: why it cannot run here (needs a GPU, a cluster, a running server...).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FWX = ROOT / "fwx"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = "<!-- runnable -->"
NOT_RUN = re.compile(r"<!-- not run: (\S.*\S) -->")
SHELL_INFO = {"bash", "sh", "shell", "console", "zsh"}
#: An untagged block starting with one of these is a shell block in disguise.
COMMAND = re.compile(
    r"^\s*(\$ )?(fwx|python3?|pip|make|docker|kubectl|curl|apt-get|\.venv/\S+|pytest|git|helm|bash|sudo)(\s|$)"
)
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")


@dataclass(frozen=True)
class Block:
    where: str  # file:line of the opening fence
    info: str
    body: str
    mark: str  # the line before the fence, stripped


def blocks(doc: Path) -> list[Block]:
    lines = doc.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), len(lines))
        prev = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        where = f"{doc.relative_to(ROOT)}:{i + 1}"
        out.append(Block(where, m.group(2), "\n".join(lines[i + 1 : end]), prev))
        i = end + 1
    return out


def _first_command(body: str) -> str:
    return next((ln for ln in body.splitlines() if ln.strip() and not ln.lstrip().startswith("#")), "")


ALL_BLOCKS = [b for doc in DOCS for b in blocks(doc)]
SHELL_BLOCKS = [
    b for b in ALL_BLOCKS if b.info in SHELL_INFO or (b.info == "" and COMMAND.match(_first_command(b.body)))
]
RUNNABLE_BLOCKS = [b for b in SHELL_BLOCKS if b.mark == RUNNABLE]


def test_the_block_finder_sees_shell_blocks() -> None:
    """The checks below are only as good as the finder: it must see the README's blocks."""
    readme = [b for b in SHELL_BLOCKS if b.where.startswith("README.md")]
    assert len(readme) >= 8
    assert any(b.mark == RUNNABLE for b in readme)
    assert any(NOT_RUN.fullmatch(b.mark) for b in readme)


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=[b.where for b in SHELL_BLOCKS])
def test_every_shell_block_runs_or_says_why_not(block: Block) -> None:
    assert block.info in SHELL_INFO, f"{block.where}: tag this shell block (```bash, or ```console for a transcript)"
    assert block.mark == RUNNABLE or NOT_RUN.fullmatch(block.mark), (
        f"{block.where}: put `{RUNNABLE}` (tests/test_docs.py runs it) or `<!-- not run: REASON -->` "
        f"right before this block; found {block.mark!r}"
    )
    if block.mark == RUNNABLE:
        assert block.info == "bash", f"{block.where}: only ```bash blocks run"


@pytest.fixture(scope="session")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    sys.path.insert(0, str(ROOT))
    from samples.models import build_torch_cnn

    work = tmp_path_factory.mktemp("docs")
    (work / "samples" / "build").mkdir(parents=True)
    torch.save(build_torch_cnn().state_dict(), work / "samples" / "build" / "cnn.pt")
    return work


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("block", RUNNABLE_BLOCKS, ids=[b.where for b in RUNNABLE_BLOCKS])
def test_runnable_block(scratch: Path, block: Block) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    # `fwx` is a function, not whatever fwx is on PATH: this checkout, the same interpreter
    script = f'fwx() {{ "{sys.executable}" -m fwx "$@"; }}\nset -euo pipefail\n{block.body}\n'
    res = subprocess.run(["bash", "-c", script], cwd=scratch, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"{block.where}: exit {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
    assert "Traceback" not in res.stderr


LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_links_stay_inside_the_repository(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    for target in LINK.findall(text):
        if re.match(r"[a-z]+://|#|mailto:", target):
            continue
        path = (doc.parent / target.split("#")[0]).resolve()
        assert path.is_relative_to(ROOT), f"{doc.name}: link {target} leaves the repository"
        assert path.exists(), f"{doc.name}: link {target} points at nothing"
    for bad in ("/work/", "../shared/", "/home/"):
        assert bad not in text, f"{doc.name} names {bad!r}, a path outside the repository"


#: Development history belongs in git, not in the docs.
HISTORY = re.compile(
    r"\b(this|previous|last|first|next|earlier|later|final) round\b|\bround's\b|\bround-\d|\bthis session\b"
    r"|\b(previous|earlier|this) session\b|\bthis task\b|\bwas lent\b",
    re.I,
)


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_no_development_history_wording(doc: Path) -> None:
    for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        m = HISTORY.search(line)
        assert not m, f"{doc.relative_to(ROOT)}:{n}: {m.group(0)!r} is history; git keeps it (say what is, with dates)"


def test_readme_is_a_guide_not_a_notebook() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; move reference material to docs/"
    head = "\n".join(lines[:40])
    for command in ("make run", "make test"):
        assert command in head, f"`{command}`, one of the two set-up commands, belongs in the first 40 lines"


# -- docs/architecture.md against fwx/ ------------------------------------------------------------

ARCH = ROOT / "docs" / "architecture.md"


def _units() -> set[str]:
    """Every package (a folder with __init__.py) and top-level module of fwx/."""
    pkgs = {p.parent.name for p in FWX.glob("*/__init__.py")}
    mods = {p.stem for p in FWX.glob("*.py") if p.stem not in ("__init__", "__main__")}
    return pkgs | mods


def _tree() -> list[str]:
    """The ```-block of the page that starts with `fwx/`: its lines."""
    block = next(b for b in blocks(ARCH) if b.body.startswith("fwx/"))
    return block.body.splitlines()


def test_architecture_names_every_package_and_module() -> None:
    text = ARCH.read_text(encoding="utf-8")
    tree = "\n".join(_tree())
    missing = sorted(
        u for u in _units() if f"`fwx.{u}`" not in text and not re.search(rf"^  {re.escape(u)}(/|\.py)\s", tree, re.M)
    )
    assert not missing, f"docs/architecture.md does not name: {missing}"


def test_architecture_tree_lists_only_what_exists() -> None:
    for line in _tree():
        entry = line.split()[0] if line.strip() else ""
        if not entry:
            continue
        base = FWX if line.startswith("  ") and not line.startswith("  zoo/") else ROOT
        if line.startswith("  zoo/"):
            base = ROOT / "tests"
        assert (base / entry.rstrip("/")).exists(), f"docs/architecture.md tree: {entry} does not exist"
    names = {ln.split()[0].rstrip("/").removesuffix(".py") for ln in _tree() if ln.startswith("  ") and ln.strip()}
    assert _units() <= names | {"zoo"}, f"tree misses {sorted(_units() - names)}"


DOTTED = re.compile(r"`(fwx(?:\.[A-Za-z_]\w*)+)`")
FILE = re.compile(r"`((?:[\w-]+/)*[\w-]+\.py)`")


def _module_exists(dotted: str) -> bool:
    """`fwx.a.b.c` names something real when its longest module prefix exists (the rest may be a name in it)."""
    parts = dotted.split(".")
    for n in range(len(parts), 1, -1):
        path = ROOT.joinpath(*parts[:n])
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            return n >= min(len(parts), 2)
    return False


def test_architecture_names_nothing_that_does_not_exist() -> None:
    text = ARCH.read_text(encoding="utf-8")
    gone = [d for d in DOTTED.findall(text) if d != "fwx.json" and not _module_exists(d)]  # fwx.json: the manifest
    assert not gone, f"docs/architecture.md names modules that do not exist: {gone}"
    py_names = {p.name for p in FWX.rglob("*.py")} | {str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")}
    py_paths = {str(p.relative_to(FWX)) for p in FWX.rglob("*.py")}
    files = [f for f in FILE.findall(text) if f not in py_names and f not in py_paths]
    assert not files, f"docs/architecture.md names files that do not exist: {files}"


def _extras() -> set[str]:
    import tomllib

    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


@pytest.mark.parametrize(("doc", "lead"), [("README.md", "Other extras:"), ("docs/cli.md", "Extras:")])
def test_extras_lists_name_every_extra(doc: str, lead: str) -> None:
    """The prose list of extras (the README's names the ones its install block does not) matches pyproject.toml."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    start = text.index(lead)
    paragraph = text[start : text.index("\n\n", start)]
    named = set(re.findall(r"`([a-z]+)`", paragraph))
    if doc == "README.md":  # the install block just above names the rest
        named |= {e for block in re.findall(r"pip install '\.\[([a-z,]+)\]'", text[:start]) for e in block.split(",")}
    assert _extras() - named == set(), f"{doc} does not list these extras"


def test_the_index_links_every_page() -> None:
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([a-z_]+\.md)", index))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"index.md"}
    assert pages - linked == set(), "docs/index.md does not link these pages"


#: Another project's file that fwx's comments cite (onnx's own docs/security.md).
_FOREIGN = re.compile(r"onnx (docs/security\.md)")


def test_files_and_commands_named_in_the_library_exist() -> None:
    """A docstring that names a test, a doc or ``python -m fwx.x`` names something that is there."""
    missing = []
    for py in sorted(FWX.rglob("*.py")):
        text = _FOREIGN.sub("", py.read_text(encoding="utf-8"))
        for path in re.findall(r"(?<![\w/.])((?:tests|benchmarks|scripts|docs|samples)/[\w./-]+\.(?:py|md|sh))", text):
            if not (ROOT / path).exists():
                missing.append(f"{py.relative_to(ROOT)}: {path}")
        for module in re.findall(r"python -m (fwx(?:\.\w+)+)", text):
            target = ROOT / (module.replace(".", "/") + ".py")
            if not target.exists() or '__name__ == "__main__"' not in target.read_text(encoding="utf-8"):
                missing.append(f"{py.relative_to(ROOT)}: python -m {module}")
    assert missing == []
