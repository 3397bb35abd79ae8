"""Silence the quantisers' chatter unless --debug.

onnxruntime's calibrators ``print`` progress to stdout and log through the root
logger; the TFLite converter writes from C++ straight to file descriptor 2.
``fwx export --json`` promises one JSON document on stdout, so all of that is
captured here and only the tail is kept for error messages.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from typing import IO


class Captured:
    def __init__(self) -> None:
        self.text = ""

    def last_line(self, default: str = "") -> str:
        lines = [ln.strip() for ln in self.text.splitlines() if ln.strip()]
        return lines[-1][:300] if lines else default


@contextlib.contextmanager
def _fd2_into(sink: IO[bytes] | None) -> Iterator[None]:
    """Point file descriptor 2 (where C++ logs go) at ``sink`` for the duration."""
    if sink is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(sink.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def quiet(native: bool = True) -> Iterator[Captured]:
    """Capture Python stdout, root-logger warnings, Python warnings and (``native``) fd 2."""
    from fwx import ui

    cap = Captured()
    if ui.state.debug:
        yield cap
        return
    buf = io.StringIO()
    with tempfile.TemporaryFile() as tmp:
        logging.disable(logging.WARNING)
        try:
            with _fd2_into(tmp if native else None), contextlib.redirect_stdout(buf), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                yield cap
        finally:
            logging.disable(logging.NOTSET)
            tmp.seek(0)
            cap.text = buf.getvalue()[-20000:] + tmp.read()[-20000:].decode("utf-8", "replace")
