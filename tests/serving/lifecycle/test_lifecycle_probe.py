"""Crash-safe loading: a crashing or truncated artifact is rejected in a child, never in the server."""

from __future__ import annotations

import asyncio
import ctypes
import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lifecycle_helpers import CRASHING_TFLITE, SIG, onnx_bytes, publish

from fwx.errors import InputError
from fwx.formats import Format
from fwx.serving import loader_probe
from fwx.serving.loader_probe import ProbeLimits, probe
from fwx.serving.models import ModelManager


class _Segfault:
    """Unpickling this kills the unpickling process with SIGSEGV, as a native parser bug would."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (ctypes.string_at, (0,))  # a NULL read: a genuine segfault


def test_probe_reports_the_signal_of_a_loader_that_crashes(tmp_path: Path) -> None:
    """A real loader (torch.load of a trusted pickle) dies by SIGSEGV in the child; we get one line."""
    bad = tmp_path / "crash.pt"
    bad.write_bytes(pickle.dumps(_Segfault()))
    with pytest.raises(InputError, match=r"loader crashed \(SIGSEGV\) on crash.pt \(pytorch\)"):
        probe(Format.PYTORCH, bad, signature=SIG, trust_model_code=True)


def test_probe_rejects_the_8_byte_tflite(tmp_path: Path) -> None:
    """TF #115308's fixture: rejected (by the runtime's check or a child crash), never in this process."""
    bad = tmp_path / "model.tflite"
    bad.write_bytes(CRASHING_TFLITE)
    with pytest.raises(InputError, match=r"loader crashed|not a valid TFLite"):
        probe(Format.TFLITE, bad, signature=SIG)


def test_probe_passes_a_good_onnx_and_refuses_a_truncated_one(tmp_path: Path) -> None:
    good = tmp_path / "good.onnx"
    good.write_bytes(onnx_bytes(1.0))
    assert probe(Format.ONNX, good, signature=SIG) > 0
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(onnx_bytes(1.0)[:40])
    with pytest.raises(InputError, match="cannot load") as info:
        probe(Format.ONNX, bad, signature=SIG)
    assert "loader crashed" not in str(info.value)


def test_probe_times_out(tmp_path: Path) -> None:
    good = tmp_path / "good.onnx"
    good.write_bytes(onnx_bytes(1.0))
    with pytest.raises(InputError, match="timed out"):
        probe(Format.ONNX, good, limits=ProbeLimits(timeout_s=0.05))


@pytest.mark.slow
def test_manager_survives_crashing_versions_and_probes_each_artifact_once(make_config: Any) -> None:
    """v2 (8-byte TFLite) and v3 (truncated ONNX) are FAILED; v1 keeps serving; this process lives."""
    cfg = make_config(prefer=[Format.ONNX, Format.TFLITE])
    publish(cfg.repository, "lin", 1)

    async def main() -> None:
        mm = ModelManager(cfg.repository, cfg)
        await mm.start()
        try:
            publish(cfg.repository, "lin", 2, kind="tflite_crash")
            publish(cfg.repository, "lin", 3, kind="truncated")
            await mm._reconcile_all()
            rows = {r["version"]: r for r in mm.index()}
            assert rows["1"]["state"] == "READY"
            assert rows["2"]["state"] == "FAILED"
            assert re.search(r"loader crashed|not a valid TFLite", rows["2"]["reason"])
            assert rows["3"]["state"] == "FAILED"
            model = mm.get("lin", None)
            assert model.version == 1
            assert model.runtime.infer({"x": np.array([[4.0]], np.float32)})["y"][0, 0] == 9.0
            # A failed version is not retried (nor logged) on every poll: no new trial load, no new failure.
            trials = sum(loader_probe.runs.values())
            await mm._reconcile_all()
            assert sum(loader_probe.runs.values()) == trials
            assert mm.load_failures["lin"] == 2
        finally:
            await mm.stop()

    asyncio.run(main())


@pytest.mark.slow
def test_stop_while_a_version_is_being_probed_is_prompt(make_config: Any) -> None:
    """SIGTERM mid-load must not wait for the probe (Triton's test_shutdown_while_loading)."""
    cfg = make_config()
    publish(cfg.repository, "lin", 1)

    async def main() -> None:
        mm = ModelManager(cfg.repository, cfg)
        await mm.start()
        publish(cfg.repository, "lin", 2, slow_ops=400)  # the probe's warm-up takes seconds
        reload = asyncio.create_task(mm._reconcile_all())
        while not any(r["state"] == "LOADING" for r in mm.index()):
            await asyncio.sleep(0.01)
        while not loader_probe._ACTIVE:  # the probe child is running (bounded by the test's timeout)
            await asyncio.sleep(0.01)
        probing = list(loader_probe._ACTIVE)
        await mm.stop()
        await reload
        # stop killed the probe instead of waiting for its verdict (a finished warm-up would exit 0)
        assert [p.returncode for p in probing] == [-9] * len(probing)
        assert mm.versions("lin") == []
        assert mm.load_failures["lin"] == 0
        assert {r["version"]: r["state"] for r in mm.index()} == {"1": "UNAVAILABLE", "2": "UNAVAILABLE"}

    asyncio.run(main())
