"""Stopping the server while a trial load runs is reported as a stop, not as a crash of the artifact."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import serving_models

from fwx.errors import InputError
from fwx.formats import Format
from fwx.serving import loader_probe
from fwx.serving.loader_probe import ProbeLimits, kill_active_probes, probe


@pytest.mark.slow
def test_stopping_during_trial_load_is_not_a_crash(tmp_path: Path) -> None:
    onnx_bytes, sig = serving_models.build_sleepy(3_000_000)
    model = tmp_path / "model.onnx"
    model.write_bytes(onnx_bytes)
    seen: list[BaseException] = []

    def run() -> None:
        try:
            probe(Format.ONNX, model, signature=sig, limits=ProbeLimits(timeout_s=120))
        except BaseException as exc:
            seen.append(exc)

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 60
    while not loader_probe._ACTIVE and t.is_alive():  # the probe child exists: it is loading now
        assert time.monotonic() < deadline, "the trial load never started its child"
        time.sleep(0.01)
    kill_active_probes()
    t.join(60)
    assert seen, "the probe finished before it could be stopped"
    assert isinstance(seen[0], InputError)
    assert "crashed" not in seen[0].message
    assert "shutting down" in seen[0].message
