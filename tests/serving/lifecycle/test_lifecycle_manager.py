"""ModelManager: version policy, format choice, checksum gate, warm-up, routing, index."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lifecycle_helpers import publish

from fwx.errors import NotFoundError, UnavailableError
from fwx.formats import Format
from fwx.serving.models import LoadedModel, ModelManager


def run_manager(cfg: Any, body: Any, **hooks: Any) -> Any:
    """Start a manager, run ``body(manager)``, stop it; returns body's result."""

    async def main() -> Any:
        mm = ModelManager(cfg.repository, cfg, **hooks)
        await mm.start()
        try:
            return await body(mm) if asyncio.iscoroutinefunction(body) else body(mm)
        finally:
            await mm.stop()

    return asyncio.run(main())


def answer(model: LoadedModel, x: float = 4.0) -> float:
    return float(model.runtime.infer({"x": np.array([[x]], np.float32)})["y"][0, 0])


def nocheck(cfg: Any) -> Any:
    cfg.load_probe = False  # the probe has its own tests; these stay fast
    return cfg


def test_latest_serves_newest_and_indexes_the_rest(make_config: Any) -> None:
    cfg = nocheck(make_config())
    publish(cfg.repository, "lin", 1)
    publish(cfg.repository, "lin", 2)
    events: list[str] = []

    async def unload(m: LoadedModel) -> None:
        events.append(f"unload {m.version}")

    def body(mm: ModelManager) -> None:
        assert mm.ready
        assert mm.models() == ["lin"]
        assert mm.versions("lin") == [2]
        m = mm.get("lin", None)
        assert (m.version, m.format, m.platform, m.batchable) == (2, Format.ONNX, "onnxruntime_onnx", True)
        assert answer(m) == 10.0  # 2*4 + version 2
        assert mm.get("lin", "2") is m
        with pytest.raises(NotFoundError, match="version 1 is not served"):
            mm.get("lin", "1")
        with pytest.raises(NotFoundError):
            mm.get("nope", None)
        with pytest.raises(NotFoundError):
            mm.get("lin", "../1")
        states = {(r["version"], r["state"]) for r in mm.index()}
        assert states == {("1", "UNAVAILABLE"), ("2", "READY")}

    run_manager(cfg, body, on_load=lambda m: events.append(f"load {m.version}"), on_unload=unload)
    assert events == ["load 2", "unload 2"]


@pytest.mark.parametrize(("policy", "served"), [("all", [1, 2, 3]), ("latest:2", [2, 3]), ("specific:1,3", [1, 3])])
def test_version_policies(make_config: Any, policy: str, served: list[int]) -> None:
    cfg = nocheck(make_config(version_policy=policy))
    for v in (1, 2, 3):
        publish(cfg.repository, "lin", v)

    def body(mm: ModelManager) -> None:
        assert mm.versions("lin") == served
        for v in served:
            assert answer(mm.get("lin", str(v))) == 8.0 + v
        assert mm.get("lin", None).version == max(served)

    run_manager(cfg, body)


@pytest.mark.parametrize("trust", [False, True], ids=["untrusted", "trusted"])
def test_checksum_mismatch_fails_newest_and_keeps_previous(make_config: Any, trust: bool) -> None:
    """--trust-model-code lets model code run; it does not let bytes fwx.json does not vouch for in."""
    cfg = nocheck(make_config(trust_model_code=trust))
    publish(cfg.repository, "lin", 1)
    publish(cfg.repository, "lin", 2, kind="checksum")
    failures: list[tuple[str, int, str]] = []

    def body(mm: ModelManager) -> None:
        assert mm.versions("lin") == [1]
        assert answer(mm.get("lin", None)) == 9.0
        row = next(r for r in mm.index() if r["version"] == "2")
        assert row["state"] == "FAILED"
        assert "checksum mismatch" in row["reason"]
        assert mm.load_failures["lin"] == 1
        assert mm.ready

    run_manager(cfg, body, on_load_failure=lambda *a: failures.append(a))
    assert [(n, v) for n, v, _ in failures] == [("lin", 2)]


def test_model_with_only_broken_versions_is_unavailable_and_not_ready(make_config: Any) -> None:
    cfg = nocheck(make_config())
    publish(cfg.repository, "bad", 1, kind="checksum")
    publish(cfg.repository, "good", 1)

    def body(mm: ModelManager) -> None:
        assert not mm.ready  # strict readiness, like Triton: every model must serve
        assert answer(mm.get("good", None)) == 9.0
        with pytest.raises(UnavailableError, match="no version ready"):
            mm.get("bad", None)

    run_manager(cfg, body)


def test_prefer_is_an_order_not_a_filter(make_config: Any, tmp_path: Path) -> None:
    """--prefer tflite with an ONNX-only version still serves it (as ONNX): a preference picks, it never hides."""
    cfg = nocheck(make_config(prefer=[Format.TFLITE]))
    publish(cfg.repository, "lin", 1)

    def body(mm: ModelManager) -> None:
        row = mm.index()[0]
        assert row["state"] == "READY", row

    run_manager(cfg, body)


def test_format_preference_and_fallback(make_config: Any, tmp_path: Path) -> None:
    """A version without an allowed artifact (--only-formats) is FAILED with a reason naming what it has."""
    cfg = nocheck(make_config(only_formats=[Format.TFLITE]))
    publish(cfg.repository, "lin", 1)

    def body(mm: ModelManager) -> None:
        row = mm.index()[0]
        assert row["state"] == "FAILED"
        assert "no servable format" in row["reason"]
        assert "onnx" in row["reason"]

    run_manager(cfg, body)
