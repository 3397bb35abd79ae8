"""README.md and docs/ say what fwx does: marked shell blocks run, links stay inside the repository.

A fenced ```bash block right after a line `<!-- runnable -->` is run with bash
(-e: every command must exit 0) in a scratch folder holding a copy of the built
sample (samples/build/cnn.pt); `fwx` is this checkout's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = "<!-- runnable -->"


def runnable_blocks() -> list[tuple[str, str]]:
    out = []
    for doc in DOCS:
        lines = doc.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if line.strip() != MARKER:
                continue
            fence = lines[i + 1].strip() if i + 1 < len(lines) else ""
            assert fence == "```bash", f"{doc.name}:{i + 1}: {MARKER} not right before a ```bash fence"
            end = next(j for j in range(i + 2, len(lines)) if lines[j].strip() == "```")
            out.append((f"{doc.relative_to(ROOT)}:{i + 2}", "\n".join(lines[i + 2 : end])))
    return out


BLOCKS = runnable_blocks()


def test_some_blocks_are_marked_runnable() -> None:
    assert len(BLOCKS) >= 2
    assert any(where.startswith("README.md") for where, _ in BLOCKS)


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
@pytest.mark.parametrize(("where", "block"), BLOCKS, ids=[w for w, _ in BLOCKS])
def test_runnable_block(scratch: Path, where: str, block: str) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    # `fwx` is a function, not whatever fwx is on PATH: this checkout, the same interpreter
    script = f'fwx() {{ "{sys.executable}" -m fwx "$@"; }}\nset -euo pipefail\n{block}\n'
    res = subprocess.run(["bash", "-c", script], cwd=scratch, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"{where}: exit {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
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
