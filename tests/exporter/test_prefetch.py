"""Hop prefetch (``--prefetch``): a later hop converted in a second process gives what in-process gives.

The tiny tf.Module SavedModel reaches TFLite by one hop from the source, so with
``--prefetch on`` its SavedModel -> TFLite runs in the prefetch process from the
start. Failures are planted with test-only edges (``prefetch_edges.py``) swapped
in for the real SavedModel -> TFLite edge.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fwx.converters.base import EdgeEntry
from fwx.errors import ExportError, UsageError
from fwx.exporter import ExportOptions, export
from fwx.exporter.prefetch import child_env
from fwx.formats import Format
from fwx.machine import usable_cores as cores

from . import prefetch_edges
from .fixtures import numbered_versions

pytestmark = pytest.mark.slow
EDGE = (Format.SAVEDMODEL, Format.TFLITE)
CHEAP = ["onnx", "savedmodel", "tflite"]  # TFLite last of three: handed to the prefetch process at once


def _children() -> list[int]:
    """Live prefetch processes of this process (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmd = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError):  # gone, or exiting (an empty stat) meanwhile: not ours to count
            continue
        if int(fields[1]) == os.getpid() and b"prefetch_child" in cmd and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Swap a test converter in for the real SavedModel -> TFLite edge."""
    from fwx.converters import base

    def plant(cls: str) -> None:
        monkeypatch.setitem(base._EDGES, EDGE, [EdgeEntry(*EDGE, prefetch_edges.__name__, cls)])

    return plant


def _export(src: Path, out: Path, targets: list[str], mode: str) -> Any:
    return export(src, targets, ExportOptions(out=out, name="m", prefetch=mode))


def _shape(manifest: Any) -> dict[str, Any]:
    """What fwx.json says about each artifact, less checksums and seconds."""
    return {
        key: {
            "path": e.path,
            "status": e.status,
            "signature": e.signature,
            "passed": e.validation.get("passed"),
            "hops": [{k: v for k, v in h.items() if k != "seconds"} for h in e.hops],
        }
        for key, e in manifest.artifacts.items()
    } | {"skipped": manifest.skipped, "failed": manifest.failed}


def test_prefetch_on_publishes_what_in_process_publishes(
    keras_files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    on = _export(keras_files["savedmodel"], tmp_path / "on", ["all"], "on")
    assert "prefetch: savedmodel -> tflite in a second process" in capsys.readouterr().err
    off = _export(keras_files["savedmodel"], tmp_path / "off", ["all"], "off")
    assert "prefetch:" not in capsys.readouterr().err
    assert on.ok
    assert off.ok
    assert sorted(on.manifest.artifacts) == ["onnx", "pt2", "savedmodel", "tflite", "torchscript"]
    assert _shape(on.manifest) == _shape(off.manifest)
    assert on.manifest.artifacts["tflite"].hops[0]["seconds"] > 0
    assert not list(on.version_dir.rglob(".work"))
    assert _children() == []


@pytest.mark.parametrize(("min_bytes", "started"), [(None, False), ("0", True)])
def test_auto_starts_a_process_only_for_big_inputs(
    keras_files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    min_bytes: str | None,
    started: bool,
) -> None:
    if min_bytes is not None:  # the 14 KiB model counts as big
        monkeypatch.setenv("FWX_PREFETCH_MIN_BYTES", min_bytes)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0, 1}, raising=False)  # 2 cores, as on CI
    res = _export(keras_files["savedmodel"], tmp_path, CHEAP, "auto")
    assert res.ok
    assert ("prefetch: savedmodel -> tflite" in capsys.readouterr().err) is started


def test_auto_leaves_a_keras_source_in_process_and_on_still_overlaps_it(
    keras_files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Measured: a chain that starts after the exporter's own hops (a Keras or torch source) gains nothing
    and can lose (torchvision ResNet-18 .pt2 9.2 -> 12.3 s): auto is for SavedModel sources only."""
    monkeypatch.setenv("FWX_PREFETCH_MIN_BYTES", "0")
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0, 1}, raising=False)
    assert _export(keras_files["keras"], tmp_path / "auto", CHEAP, "auto").ok
    assert "prefetch:" not in capsys.readouterr().err
    assert _export(keras_files["keras"], tmp_path / "on", CHEAP, "on").ok
    assert "prefetch: savedmodel -> tflite" in capsys.readouterr().err


def test_a_converter_error_in_the_child_is_the_in_process_error(
    keras_files: dict[str, Path], tmp_path: Path, planted: Any
) -> None:
    planted("RaisesExportError")
    res = _export(keras_files["savedmodel"], tmp_path / "all", ["all"], "on")
    with pytest.raises(ExportError) as in_process:
        _export(keras_files["savedmodel"], tmp_path / "one", ["tflite"], "off")
    assert res.manifest.skipped["tflite"] == in_process.value.message
    assert in_process.value.message == "savedmodel -> tflite (planted-error): planted failure"
    assert sorted(res.manifest.artifacts) == ["onnx", "pt2", "savedmodel", "torchscript"]
    assert not (res.version_dir / "model.tflite").exists()
    assert _children() == []


@pytest.mark.parametrize(
    ("cls", "line"),
    [
        ("RaisesRuntimeError", "savedmodel -> tflite (planted-bug): failed: planted bug"),
        ("Aborts", "savedmodel -> tflite (planted-abort): converter crashed (SIGABRT)"),
        ("KillsItself", "savedmodel -> tflite (planted-kill): converter crashed (SIGKILL)"),
    ],
)
def test_a_failed_or_dead_child_fails_that_hop_only(
    keras_files: dict[str, Path], tmp_path: Path, planted: Any, cls: str, line: str
) -> None:
    planted(cls)
    with pytest.raises(ExportError) as exc:  # a hang waiting for a dead child would hit pytest's timeout
        _export(keras_files["savedmodel"], tmp_path, CHEAP, "on")
    assert exc.value.message == f"tflite: {line}"  # the failed target, then its hop (onnx and savedmodel passed)
    assert "\n" not in str(exc.value)
    assert numbered_versions(tmp_path) == []
    assert _children() == []


def _main_thread_waits_for_the_child() -> bool:
    """The main thread is in ``Prefetcher._poll``: its loop, where Ctrl-C lands as KeyboardInterrupt."""
    from fwx.exporter.prefetch import Prefetcher

    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    while frame is not None:
        if frame.f_code is Prefetcher._poll.__code__:
            return True
        frame = frame.f_back
    return False


def test_ctrl_c_kills_the_prefetch_process(keras_files: dict[str, Path], tmp_path: Path, planted: Any) -> None:
    """Ctrl-C while the export waits for the prefetch process (which sleeps in its planted hop).

    The race this removes: the signal used to go a fixed 0.5 s after the child appeared. On a loaded
    machine the export was then still converting its other targets in-process, and Python runs a
    signal handler wherever the main thread is; inside a ``__del__`` (TensorFlow's functions and
    tensors have them, and conversions free thousands) the KeyboardInterrupt is printed as
    "Exception ignored" and dropped, so the export went on and waited out the child's 120 s sleep.
    The timer thread also died silently on any error, sending nothing. Now the signal goes only once
    the main thread is seen (in its live frame) waiting for the child's answer, a plain Python loop,
    and a failure of the interrupting thread fails the test instead of leaving the export waiting.
    """
    planted("Sleeps")
    problems: list[str] = []

    def interrupt() -> None:
        try:
            deadline = time.monotonic() + 300
            while not (_children() and _main_thread_waits_for_the_child()):
                if time.monotonic() > deadline:
                    problems.append("the export never waited for the prefetch process")
                    return
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException as exc:  # a failure here must fail the test, not leave the export waiting
            problems.append(repr(exc))

    # Ctrl-C as a terminal delivers it to a foreground export: Python's own handler. A test runner started
    # in the background (`cmd &` from a script) starts Python with SIGINT ignored, and then the export
    # rightly ignores Ctrl-C too; no test leaves another handler (tests/conftest.py fails one that does).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=interrupt, daemon=True).start()
    outcome: BaseException | None = None
    try:
        _export(keras_files["savedmodel"], tmp_path, CHEAP, "on")
    except (KeyboardInterrupt, ExportError) as exc:
        outcome = exc
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not problems, problems
    assert isinstance(outcome, KeyboardInterrupt), outcome
    assert _children() == []
    assert numbered_versions(tmp_path) == []
    assert not [p for p in tmp_path.rglob("*") if p.name == "model.tflite"]


def test_prefetch_mode_is_checked_before_loading(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res = cli("export", tmp_path / "missing.onnx", "--to", "onnx", "--prefetch", "maybe", "--out", tmp_path)
    assert res.code == 2
    assert "--prefetch" in res.err
    monkeypatch.setenv("FWX_PREFETCH", "sometimes")
    with pytest.raises(UsageError, match="FWX_PREFETCH 'sometimes'"):
        ExportOptions()
    assert "--prefetch" in cli("export", "--help").out


def test_the_child_inherits_no_secrets() -> None:
    env = {"PATH": "/bin", "HOME": "/h", "TF_CPP_MIN_LOG_LEVEL": "3", "FWX_API_KEY": "k", "FWX_TOKEN": "t"}
    env |= {"AWS_SECRET_ACCESS_KEY": "s", "GITHUB_TOKEN": "g", "SOMETHING": "x"}
    kept = child_env(env)
    assert {k: v for k, v in kept.items() if not k.endswith("THREADS")} == {
        "PATH": "/bin",
        "HOME": "/h",
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }
    assert kept["OMP_NUM_THREADS"] == kept["TF_NUM_INTRAOP_THREADS"] == str(max(1, cores() // 2))


def test_the_exporters_torch_pool_yields_the_childs_cores_while_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two pools as wide as the machine straggle (an op waits for the thread that lost its core): while the
    child converts, the exporter's torch pool is the rest of the cores, and its old size comes back after."""
    import torch

    from fwx.exporter.prefetch import Prefetcher

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    pf = Prefetcher(tmp_path, {}, [], "on")
    pf._share_cores()
    assert torch.get_num_threads() == max(1, cores() - cores() // 2)
    pf.close()
    assert torch.get_num_threads() == before
    monkeypatch.setenv("OMP_NUM_THREADS", str(before))  # a size the user chose is kept
    pf = Prefetcher(tmp_path, {}, [], "on")
    pf._share_cores()
    assert pf.torch_threads is None
    pf.close()
