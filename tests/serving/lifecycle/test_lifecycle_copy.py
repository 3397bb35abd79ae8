"""A version copied with plain ``cp`` (fwx.json first, the model file later) loads once its files are complete."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lifecycle_helpers import count_polls, publish

from fwx.manifest import MANIFEST_NAME
from fwx.serving.models import LoadedModel, ModelManager


async def _until(cond: Callable[[], bool], timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        await asyncio.sleep(0.02)


def _state(mm: ModelManager, version: str) -> str | None:
    return next((r["state"] for r in mm.index() if r["version"] == version), None)


def test_failed_version_is_retried_when_its_files_change(make_config: Any, tmp_path: Path) -> None:
    cfg = make_config(poll_seconds=0.05)
    cfg.load_probe = False
    publish(cfg.repository, "lin", 1)
    src = publish(tmp_path / "elsewhere", "lin", 2)  # a complete version outside the repository
    dst = cfg.repository / "lin" / "2"
    attempts: list[int] = []

    def on_load(m: LoadedModel) -> None:
        attempts.append(m.version)

    async def main() -> None:
        mm = ModelManager(cfg.repository, cfg, on_load=on_load)
        polls = count_polls(mm)
        await mm.start()
        failures = lambda: mm.load_failures["lin"]  # noqa: E731
        dst.mkdir()
        shutil.copy(src / MANIFEST_NAME, dst / MANIFEST_NAME)  # what `cp -r` does: fwx.json may come first
        data = (src / "model.onnx").read_bytes()
        (dst / "model.onnx").write_bytes(data[: len(data) // 3])
        await _until(lambda: _state(mm, "2") == "FAILED")
        seen, scans = failures(), polls()
        await _until(lambda: polls() >= scans + 3)  # several polls, nothing changed: no retry loop
        assert failures() == seen
        assert _state(mm, "2") == "FAILED"
        (dst / "model.onnx").write_bytes(data)  # the copy finishes: size and mtime change
        os.utime(dst / "model.onnx", ns=(time.time_ns(), time.time_ns() + 10**9))
        await _until(lambda: mm.versions("lin") == [2], timeout=30)
        assert _state(mm, "2") == "READY"
        await mm.stop()

    asyncio.run(main())
    assert attempts == [1, 2]
