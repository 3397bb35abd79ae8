"""Loading a SavedModel or TFLite artifact prints no framework banners (``fwx validate``/``fwx serve``).

TensorFlow logs CUDA-driver and CPU-feature lines from C++ at import, and LiteRT
prints its XNNPACK banner on the first allocation; the runtimes import through
``fwx.frameworks.require`` and load inside ``fwx.quiet.quiet(native=True)``. Checked in a
fresh process with none of the TF_* quieting variables the test session sets.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

_SCRIPT = """
import sys
from pathlib import Path
from fwx.formats import Format
from fwx.runtimes.base import load_runtime
for fmt, path in ((Format.TFLITE, sys.argv[1]), (Format.SAVEDMODEL, sys.argv[2])):
    rt = load_runtime(fmt, Path(path))
    print(fmt, rt.signature(), file=sys.stdout)
    rt.close()
"""


def test_tf_runtimes_load_without_banners(keras_files: dict[str, Path]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "GRPC_"))}
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(keras_files["tflite"]), str(keras_files["savedmodel"])],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("->") == 2, proc.stdout
    for banner in ("XNNPACK", "cuda", "oneDNN", "absl", "cpu_feature_guard"):
        assert banner not in proc.stderr, proc.stderr
    from fwx.quiet import _saved_fds

    assert not _saved_fds  # nothing in this process is left redirected
