"""Hot reload with a spare (pre-imported) probe child: same verdicts as a fresh child, and crash-safe."""

from __future__ import annotations

import asyncio
import ctypes
import pickle
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lifecycle_helpers import SIG, onnx_bytes, publish

from fwx.errors import InputError
from fwx.formats import Format
from fwx.serving import loader_probe
from fwx.serving.loader_probe import drop_spares, keep_warm, kill_active_probes, probe, spare_formats
from fwx.serving.models import LoadedModel, ModelManager


@pytest.fixture(autouse=True)
def _no_spares_left() -> Any:
    yield
    kill_active_probes()
    assert spare_formats() == []


def _onnx(folder: Path, name: str, bias: float, *, truncated: bool = False) -> Path:
    data = onnx_bytes(bias)
    path = folder / name
    path.write_bytes(data[: len(data) // 2] if truncated else data)
    return path


def _ran(kind: str, fn: Any) -> Any:
    before = loader_probe.runs[kind]
    result = fn()
    assert loader_probe.runs[kind] == before + 1, f"the trial load did not run in a {kind} child"
    return result


def test_spare_passes_a_good_artifact_and_refuses_a_truncated_one(tmp_path: Path) -> None:
    known = _onnx(tmp_path, "v1.onnx", 1.0)
    keep_warm(Format.ONNX, known, signature=SIG)
    assert spare_formats() == [Format.ONNX]
    assert _ran("spare", lambda: probe(Format.ONNX, _onnx(tmp_path, "v2.onnx", 2.0), signature=SIG)) > 0
    assert spare_formats() == [], "a spare judges one artifact only"
    keep_warm(Format.ONNX, known, signature=SIG)
    with pytest.raises(InputError, match="cannot load") as info:
        _ran("spare", lambda: probe(Format.ONNX, _onnx(tmp_path, "bad.onnx", 3.0, truncated=True), signature=SIG))
    assert "loader crashed" not in str(info.value)


def test_a_spare_that_cannot_warm_up_is_not_blamed_on_the_artifact(tmp_path: Path) -> None:
    """Its own warm-up artifact fails (deleted, corrupt): the new artifact is judged in a fresh child."""
    keep_warm(Format.ONNX, _onnx(tmp_path, "gone.onnx", 1.0, truncated=True), signature=SIG)
    spare = loader_probe._SPARES[Format.ONNX]
    spare.wait(60)  # its warm-up failed (had a job been waiting, it would have skipped the warm-up)
    assert spare.returncode == 4
    assert _ran("fresh", lambda: probe(Format.ONNX, _onnx(tmp_path, "v2.onnx", 2.0), signature=SIG)) > 0


def test_a_spare_is_not_replaced_while_alive_and_stops_with_the_server(tmp_path: Path) -> None:
    keep_warm(Format.ONNX, _onnx(tmp_path, "v1.onnx", 1.0), signature=SIG)
    first = loader_probe._SPARES[Format.ONNX]
    keep_warm(Format.ONNX, _onnx(tmp_path, "v2.onnx", 2.0), signature=SIG)
    assert loader_probe._SPARES[Format.ONNX] is first
    kill_active_probes()
    assert first.returncode is not None


class _Segfault:
    """Unpickling this kills the unpickling process with SIGSEGV, as a native parser bug would."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (ctypes.string_at, (0,))  # a NULL read: a genuine segfault


@pytest.mark.slow
def test_a_spare_reports_the_crash_of_the_new_artifact(tmp_path: Path) -> None:
    """A pre-imported torch child dies by SIGSEGV on the new artifact: one line, this process lives."""
    import torch

    good = tmp_path / "good.pt"
    torch.save(torch.nn.Linear(1, 1), good)
    bad = tmp_path / "crash.pt"
    bad.write_bytes(pickle.dumps(_Segfault()))
    keep_warm(Format.PYTORCH, good, trust_model_code=True)
    with pytest.raises(InputError, match=r"loader crashed \(SIGSEGV\) on crash.pt \(pytorch\)"):
        _ran("spare", lambda: probe(Format.PYTORCH, bad, signature=SIG, trust_model_code=True))


async def _until(cond: Any, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


async def _client(mm: ModelManager, stop: asyncio.Event, seen: list[tuple[int, float]], errors: list[str]) -> None:
    """Version-less requests, as the data plane resolves them (latest policy)."""
    while not stop.is_set():
        try:
            model = mm.get("lin", None)
            with model.use():
                out = await asyncio.to_thread(model.runtime.infer, {"x": np.array([[4.0]], np.float32)})
            seen.append((model.version, float(out["y"][0, 0])))
        except Exception as exc:
            errors.append(repr(exc))
        await asyncio.sleep(0.005)


def test_reload_probes_in_the_spare_and_a_broken_version_ends_failed(make_config: Any) -> None:
    """v2 is probed by the spare, becomes READY and routable; v1 answers until then; a broken v3 ends
    FAILED while v2 serves; a spare warmed on v2 replaces the used one."""
    cfg = make_config(poll_seconds=0.05)
    publish(cfg.repository, "lin", 1)
    loaded: list[int] = []

    def on_load(m: LoadedModel) -> None:
        loaded.append(m.version)

    async def main() -> None:
        mm = ModelManager(cfg.repository, cfg, on_load=on_load)
        await mm.start()
        stop, seen, errors = asyncio.Event(), [], []
        client = asyncio.create_task(_client(mm, stop, seen, errors))
        try:
            assert spare_formats() == [Format.ONNX]
            first = loader_probe._SPARES[Format.ONNX]
            await asyncio.sleep(1.0)  # the spare imports onnxruntime and warms up on v1
            spare_runs = loader_probe.runs["spare"]
            await asyncio.to_thread(publish, cfg.repository, "lin", 2)
            await _until(lambda: mm.versions("lin") == [2])
            assert loader_probe.runs["spare"] == spare_runs + 1
            assert {r["version"]: r["state"] for r in mm.index()} == {"1": "UNAVAILABLE", "2": "READY"}
            await _until(lambda: any(v == 2 for v, _ in seen))
            assert spare_formats() == [Format.ONNX]
            assert loader_probe._SPARES[Format.ONNX] is not first, "a spare warmed on v2 replaced the used one"
            await asyncio.to_thread(publish, cfg.repository, "lin", 3, kind="truncated")
            await _until(lambda: any(r["version"] == "3" and r["state"] == "FAILED" for r in mm.index()))
            await asyncio.sleep(0.2)
        finally:
            stop.set()
            await client
            await mm.stop()
        assert errors == []
        versions = [v for v, _ in seen]
        assert versions == sorted(versions), "v1 until the switch, then v2 only"
        assert set(versions) == {1, 2}
        assert all(y == 8.0 + v for v, y in seen)
        assert loaded == [1, 2]
        assert mm.load_failures["lin"] == 1

    asyncio.run(main())


@pytest.mark.parametrize(
    ("settings", "wanted"),
    [
        ({"poll_seconds": 0.05}, True),
        ({"poll_seconds": 0}, False),  # no reload can happen: no spare memory spent
        ({"poll_seconds": 0, "enable_model_control": True, "admin_token": "t" * 16}, True),
        ({"poll_seconds": 0.05, "probe_spare": False}, False),
        ({"poll_seconds": 0.05, "load_probe": False}, False),
    ],
)
def test_spares_only_where_reloads_probe(make_config: Any, settings: dict[str, Any], wanted: bool) -> None:
    cfg = make_config(**settings)
    publish(cfg.repository, "lin", 1)

    async def main() -> list[Format]:
        mm = ModelManager(cfg.repository, cfg)
        await mm.start()
        try:
            return spare_formats()
        finally:
            await mm.stop()

    assert asyncio.run(main()) == ([Format.ONNX] if wanted else [])


def test_drop_spares_stops_the_formats_no_longer_served(tmp_path: Path) -> None:
    keep_warm(Format.ONNX, _onnx(tmp_path, "v1.onnx", 1.0), signature=SIG)
    spare = loader_probe._SPARES[Format.ONNX]
    drop_spares({Format.ONNX, Format.TFLITE})
    assert spare_formats() == [Format.ONNX]
    drop_spares({Format.TFLITE})  # the model's new version is TFLite only
    assert spare_formats() == []
    assert spare.returncode is not None
