"""``frameworks.require`` from two threads: the second caller waits for the first import to finish.

No clocks: the module being imported blocks on an event the test holds, and the test releases it only
once the second thread is parked on the import lock (read from its live frame), so the check holds on
any machine, however loaded. Every wait has a deadline.
"""

from __future__ import annotations

import inspect
import sys
import threading
import time
from pathlib import Path
from types import FrameType

import pytest

from fwx import frameworks
from fwx.frameworks import require

DEADLINE_S = 60.0
GATE = "import threading\nstarted = threading.Event()\nrelease = threading.Event()\n"
SLOW = "import fwx_gate\nfwx_gate.started.set()\nassert fwx_gate.release.wait(60)\nready = True\n"


def _lock_line() -> int:
    lines, first = inspect.getsourcelines(require)
    return first + next(i for i, ln in enumerate(lines) if "with _IMPORT_LOCK" in ln)


def _parked_on_the_import_lock(thread: threading.Thread) -> bool:
    """The thread's innermost Python frame is ``require`` at its lock, or importlib waiting on the module lock."""
    frame: FrameType | None = sys._current_frames().get(thread.ident or -1)
    if frame is None:
        return False
    if frame.f_code is require.__code__:
        return frame.f_lineno == _lock_line()
    return frame.f_code.co_name in ("acquire", "_lock_unlock_module") and "importlib" in frame.f_code.co_filename


def test_second_thread_never_gets_a_half_imported_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The server loads two models at once; both threads may ask for onnx while it is being imported.
    (tmp_path / "fwx_gate.py").write_text(GATE)
    (tmp_path / "fwx_slow_import.py").write_text(SLOW)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("fwx_gate", "fwx_slow_import"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import fwx_gate  # type: ignore[import-not-found]

    seen: dict[str, bool] = {}
    first = threading.Thread(target=lambda: require("fwx_slow_import", "a test"), daemon=True)
    second = threading.Thread(
        target=lambda: seen.update(second=hasattr(require("fwx_slow_import", "a test"), "ready")), daemon=True
    )
    try:
        first.start()
        assert fwx_gate.started.wait(DEADLINE_S), "the first import never started"  # half imported from here
        second.start()
        deadline = time.monotonic() + DEADLINE_S
        while second.is_alive() and not _parked_on_the_import_lock(second):
            assert time.monotonic() < deadline, "the second thread neither returned nor waited on the import lock"
            time.sleep(0.005)
    finally:
        fwx_gate.release.set()
        first.join(DEADLINE_S)
        second.join(DEADLINE_S)
        sys.modules.pop("fwx_slow_import", None)
    assert not first.is_alive()
    assert not second.is_alive()
    assert seen["second"], "require returned a module another thread was still importing"
    assert frameworks._IMPORT_LOCK.acquire(blocking=False)  # and nothing left it held
    frameworks._IMPORT_LOCK.release()
