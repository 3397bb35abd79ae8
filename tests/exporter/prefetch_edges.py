"""Test-only SavedModel -> TFLite edges that fail in the ways a real converter can, for ``test_prefetch.py``.

A test swaps one in for the real edge (``monkeypatch`` on the registry's table), so
the exporter hands it to its prefetch process. The process-killing ones only kill
the prefetch process: run anywhere else (the pytest process) they raise instead.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from fwx.converters.base import Converter, ConvertOptions, ConvertResult, SourceModel
from fwx.errors import ExportError
from fwx.formats import Format


def _in_prefetch_process() -> bool:
    return "fwx.exporter.prefetch_child" in sys.modules


class _Planted(Converter):
    source = Format.SAVEDMODEL
    target = Format.TFLITE
    prefetchable = True

    def convert(self, src: SourceModel, out: Path, opts: ConvertOptions) -> ConvertResult:
        out.write_bytes(b"half a model")  # a half-written artifact that must never be published
        self.fail()
        raise AssertionError("unreachable")

    def fail(self) -> None:
        raise NotImplementedError


class RaisesExportError(_Planted):
    tool = "planted-error"

    def fail(self) -> None:
        raise ExportError("planted failure", hint="a test converter")


class RaisesRuntimeError(_Planted):
    tool = "planted-bug"

    def fail(self) -> None:
        raise RuntimeError("planted bug\nsecond line")


class Aborts(_Planted):
    tool = "planted-abort"

    def fail(self) -> None:
        if _in_prefetch_process():
            os.abort()
        raise ExportError("would abort")


class KillsItself(_Planted):
    tool = "planted-kill"

    def fail(self) -> None:
        if _in_prefetch_process():
            os.kill(os.getpid(), signal.SIGKILL)  # what the kernel's OOM killer does
        raise ExportError("would be killed")


class Sleeps(_Planted):
    tool = "planted-sleep"

    def fail(self) -> None:
        if _in_prefetch_process():
            time.sleep(120)
        raise ExportError("would sleep")
