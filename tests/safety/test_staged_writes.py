"""An export writes only its stage: the loader may not write the repository, its model folder, or HOME.

The command's process stages the outputs (``fwx.repository.Outbox``) and
publishes them at the end; the loader behind the walls is granted the stage
and nothing else. Model code trusted to run (a factory source under
``--trust-model-code``, which runs inside the same walls) tries to write
beside the repository, into the model's own published folder, into another
model's folder and into a home folder: every write is refused with EACCES,
and only the published version appears.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fwx.safety import landlock

pytestmark = [
    pytest.mark.skipif(landlock.abi_version() < 1, reason="the kernel offers no Landlock"),
    pytest.mark.slow,
    pytest.mark.e2e,
]

FACTORY = """
import os
import torch

def build():
    for target in {targets!r}:
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w") as fh:
                fh.write("escaped")
            print("WROTE", target, flush=True)
        except OSError as exc:
            print("DENIED", target, exc.errno, flush=True)
    return torch.nn.Linear(1, 1)
"""


def test_model_code_in_the_loader_cannot_write_outside_the_stage(tmp_path: Path) -> None:
    repo, home = tmp_path / "repo", tmp_path / "home"
    (repo / "other").mkdir(parents=True)
    home.mkdir()
    targets = [str(p) for p in (repo / "x.txt", repo / "m" / "x.txt", repo / "other" / "x.txt", home / "x.txt")]
    (tmp_path / "escaper.py").write_text(FACTORY.format(targets=targets))
    res = subprocess.run(
        [sys.executable, "-m", "fwx", "export", "escaper.py:build", "--trust-model-code"]
        + ["--input", "x:float32[1,1]", "--to", "torchscript", "--out", "repo", "--name", "m"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr
    assert [line.split()[0] for line in res.stdout.splitlines() if line.startswith(("WROTE", "DENIED"))] == [
        "DENIED"
    ] * len(targets), res.stdout
    assert all(line.endswith(" 13") for line in res.stdout.splitlines() if line.startswith("DENIED"))  # EACCES
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == [
        "escaper.py",
        "repo/m/1/fwx.json",
        "repo/m/1/model.torchscript.pt",
    ]
