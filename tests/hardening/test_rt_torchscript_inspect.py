"""``fwx inspect`` reads a TorchScript archive as text within the zip bounds and in linear time.

Two files made the text reader the resource attack: a 0.5 MB archive whose ``data.pkl`` inflated to
512 MiB of pickle opcodes (walked one by one for minutes), and a 10 KB one whose code file made the
``forward`` regex backtrack for hours (the loader's CPU-time limit, 1 h, was the only end).
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fwx.errors import UnsafeModelError
from fwx.sources.inspection import torchscript_forward


def _archive(path: Path, code: str, pickle: bytes, repeat: int = 0) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("archive/constants.pkl", b"\x80\x02).")
        zf.writestr("archive/code/__torch__/m.py", code)
        with zf.open("archive/data.pkl", "w", force_zip64=True) as fh:
            fh.write(pickle)
            block = b"N" * (1 << 20)  # NONE opcodes: ~1000:1 under deflate
            for _ in range(repeat):
                fh.write(block)
            fh.write(b".")
    return path


def test_a_code_file_built_to_backtrack_is_read_at_once(tmp_path: Path) -> None:
    code = "class M(" + "def forward(self, a" * 200_000 + "\n"
    path = _archive(tmp_path / "m.pt", code, b"\x80\x02c__torch__.m\nM\n")
    # a deadline, not a measurement: the old regex ran for hours on this file
    proc = subprocess.run(
        [sys.executable, "-m", "fwx", "--json", "inspect", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert '"forward": null' in proc.stdout


def test_a_data_pickle_past_the_inflate_budget_is_refused_before_inflating(tmp_path: Path) -> None:
    path = _archive(tmp_path / "bomb.pt", "class M:\n  pass\n", b"\x80\x02", repeat=300)
    assert path.stat().st_size < (1 << 20)
    with pytest.raises(UnsafeModelError, match="past the 256 MiB inflate budget"):
        torchscript_forward(path)


def test_a_pickle_that_never_names_a_global_is_not_walked_to_its_end(tmp_path: Path) -> None:
    path = _archive(tmp_path / "nones.pt", "class M:\n  pass\n", b"\x80\x02", repeat=60)
    assert torchscript_forward(path) == (None, None)
