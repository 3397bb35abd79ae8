"""Hot reload in the manager: new versions swap in after warm-up, broken ones never do, none fails a request."""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from typing import Any

import numpy as np
import pytest
from lifecycle_helpers import count_polls, publish

from fwx.serving.models import LoadedModel, ModelManager


async def _steady_load(
    mm: ModelManager, stop: asyncio.Event, log: list[tuple[float, int, float]], errors: list[str]
) -> None:
    """Like the data plane: resolve the newest version, run it in a thread, hold ``use()`` meanwhile."""
    while not stop.is_set():
        try:
            model = mm.get("lin", None)
            with model.use():
                out = await asyncio.to_thread(model.runtime.infer, {"x": np.array([[4.0]], np.float32)})
            log.append((time.monotonic(), model.version, float(out["y"][0, 0])))
        except Exception as exc:
            errors.append(repr(exc))
        await asyncio.sleep(0)


def test_poll_swaps_after_warmup_and_survives_a_corrupt_version(
    make_config: Any, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = make_config(poll_seconds=0.05)
    cfg.load_probe = False
    publish(cfg.repository, "lin", 1)
    loaded_at: dict[int, float] = {}
    closed: list[int] = []

    def on_load(m: LoadedModel) -> None:
        loaded_at[m.version] = time.monotonic()
        close = m.runtime.close
        m.runtime.close = lambda: (closed.append(m.version), close())  # type: ignore[method-assign]

    async def main() -> None:
        mm = ModelManager(cfg.repository, cfg, on_load=on_load)
        polls = count_polls(mm)
        await mm.start()
        stop, log, errors = asyncio.Event(), [], []
        client = asyncio.create_task(_steady_load(mm, stop, log, errors))
        await _until(lambda: len(log) >= 5)  # v1 answers before v2 is published
        await asyncio.to_thread(publish, cfg.repository, "lin", 2)
        await _until(lambda: mm.versions("lin") == [2] and closed == [1])
        await asyncio.to_thread(publish, cfg.repository, "lin", 3, kind="checksum")
        (cfg.repository / "lin" / "junk").mkdir()
        await _until(lambda: any(r["version"] == "3" and r["state"] == "FAILED" for r in mm.index()))
        seen = polls()
        await _until(lambda: polls() >= seen + 3)  # several more polls: v3 is not retried, junk not re-logged
        stop.set()
        await client
        await mm.stop()
        assert errors == []
        versions = [v for _, v, _ in log]
        assert versions == sorted(versions), "one switch, 1 -> 2, never back"
        assert set(versions) == {1, 2}
        assert all(y == 8.0 + v for _, v, y in log), "every answer came from the version that claims it"
        assert min(t for t, v, _ in log if v == 2) > loaded_at[2], "v2 answered only after its warm-up"
        assert mm.load_failures["lin"] == 1
        assert sorted(closed) == [1, 2]

    with caplog.at_level(logging.INFO, logger="fwx.serving"):
        asyncio.run(main())
    assert sum("junk" in r.getMessage() for r in caplog.records) == 1
    assert sum("v3 failed to load" in r.getMessage() for r in caplog.records) == 1


def test_removed_version_is_unloaded_and_the_previous_one_returns(make_config: Any) -> None:
    cfg = make_config(poll_seconds=0.05)
    cfg.load_probe = False
    publish(cfg.repository, "lin", 1)
    publish(cfg.repository, "lin", 2)

    async def main() -> None:
        mm = ModelManager(cfg.repository, cfg)
        await mm.start()
        try:
            assert mm.versions("lin") == [2]
            await asyncio.to_thread(shutil.rmtree, cfg.repository / "lin" / "2")
            await _until(lambda: mm.versions("lin") == [1])
            row = next(r for r in mm.index() if r["version"] == "2")
            assert (row["state"], row["reason"]) == ("UNAVAILABLE", "removed from the repository")
            await asyncio.to_thread(shutil.rmtree, cfg.repository / "lin")
            await _until(lambda: mm.versions("lin") == [])
            assert mm.ready  # a model folder that is gone does not block readiness
        finally:
            await mm.stop()

    asyncio.run(main())


def test_new_model_folder_is_picked_up(make_config: Any) -> None:
    cfg = make_config(poll_seconds=0.05)
    cfg.load_probe = False

    async def main() -> None:
        mm = ModelManager(cfg.repository, cfg)
        await mm.start()
        try:
            assert mm.models() == []
            assert mm.ready
            await asyncio.to_thread(publish, cfg.repository, "other", 1, bias=5.0)
            await _until(lambda: mm.versions("other") == [1])
            out = mm.get("other", "1").runtime.infer({"x": np.array([[1.0]], np.float32)})
            assert out["y"][0, 0] == 7.0
        finally:
            await mm.stop()

    asyncio.run(main())


async def _until(cond: Any, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)
