"""A sparse file in a model folder cannot fill the disk through fwx's private copy of the model.

A file of 1 TiB apparent size takes no disk space for its author (``truncate -s``, or a sparse
member of a tar), but a byte-for-byte copy writes every byte. The copy is refused before a byte
is written when it cannot fit, in one line. The child runs under ``RLIMIT_FSIZE`` so that, were the
refusal missing, this test would write 64 MiB and fail instead of filling the machine's disk.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CHILD = """
import resource, signal, sys
from pathlib import Path
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))
from fwx.errors import FwxError
from fwx.safety import snapshot
try:
    snapshot.take(Path(sys.argv[1]), parent=Path(sys.argv[2]))
except FwxError as exc:
    print("REFUSED", exc.message)
except OSError as exc:
    print("OSERROR", exc)
else:
    print("COPIED")
"""


def test_a_sparse_file_bigger_than_the_free_space_is_refused_before_copying(tmp_path: Path) -> None:
    version = tmp_path / "m" / "1"
    version.mkdir(parents=True)
    (version / "fwx.json").write_text("{}")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    vfs = os.statvfs(scratch)
    size = vfs.f_bavail * vfs.f_frsize + (1 << 30)
    with open(version / "model.onnx", "wb") as fh:
        fh.truncate(size)  # a hole: no block of it is on disk
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(version), str(scratch)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    out = proc.stdout.strip()
    assert out.startswith("REFUSED cannot copy"), out + proc.stderr
    assert "GiB are free there" in out
    assert "\n" not in out
    assert not [p for p in scratch.rglob("*") if p.is_file()], "nothing is left half-copied"
