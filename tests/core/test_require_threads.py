"""``frameworks.require`` from two threads: the second caller waits for the first import to finish."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from fwx.frameworks import require


def test_second_thread_never_gets_a_half_imported_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The server loads two models at once; both threads may ask for onnx while it is being imported.
    (tmp_path / "fwx_slow_import.py").write_text("import time\ntime.sleep(0.6)\nready = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fwx_slow_import", raising=False)
    seen: dict[str, bool] = {}

    first = threading.Thread(target=lambda: require("fwx_slow_import", "a test"))
    first.start()
    while "fwx_slow_import" not in sys.modules:  # the first import is under way
        pass
    seen["second"] = hasattr(require("fwx_slow_import", "a test"), "ready")
    first.join()
    sys.modules.pop("fwx_slow_import", None)
    assert seen["second"], "require returned a module another thread was still importing"
