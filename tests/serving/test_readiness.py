"""Truthful start-up: "ready" is logged only when /v2/health/ready says so; a wrong folder is refused."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fwx.errors import UsageError
from fwx.serving.readiness import check_repository

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, make_repo: Callable[..., Path]) -> Path:
    return make_repo(tmp_path_factory.mktemp("ready") / "artifacts", {"lin": "linear"})


def test_a_repository_passes(repo: Path) -> None:
    check_repository(repo)


@pytest.mark.parametrize(
    ("sub", "what", "suggest"),
    [
        ("lin/1", "is one model version", "artifacts/"),
        ("lin", "is one model's folder", "artifacts/"),
    ],
)
def test_model_or_version_folder_is_refused(
    repo: Path, sub: str, what: str, suggest: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(repo.parent)
    with pytest.raises(UsageError) as err:
        check_repository(Path("artifacts") / sub)
    assert what in err.value.message
    assert f"did you mean {suggest}?" in (err.value.hint or "")
    with pytest.raises(UsageError) as err:  # absolute in, absolute out
        check_repository(repo / sub)
    assert f"did you mean {repo}/?" in (err.value.hint or "")


def test_empty_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "half" / "1").mkdir(parents=True)  # a version without fwx.json does not count
    with pytest.raises(UsageError, match="holds no model"):
        check_repository(tmp_path)


def test_cli_exits_2_with_one_line(repo: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "fwx", "serve", str(repo / "lin" / "1"), "--http-port", "0", "--grpc-port", "-1"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"did you mean {repo}/?" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_ready_is_logged_only_when_ready(
    repo: Path, tmp_path: Path, make_repo: Callable[..., Path], live_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="fwx"):
        good = live_server(repo, load_probe=False)
        assert good.request("GET", "/v2/health/ready").status_code == 200
    assert any(r.getMessage().startswith("fwx serve ready") for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="fwx"):
        # the only artifact of lin v1 no longer matches its sha256 in fwx.json: not ready
        broken = make_repo(tmp_path / "broken", {"lin": "linear"})
        version = broken / "lin" / "1"
        originals = {p: p.read_bytes() for p in version.glob("*.onnx")}
        for artifact, data in originals.items():
            artifact.write_bytes(data + b"tampered")
        bad = live_server(broken, load_probe=False, poll_seconds=0.2)
        assert bad.request("GET", "/v2/health/ready").status_code == 400
        messages = [r.getMessage() for r in caplog.records]
        assert not any(m.startswith("fwx serve ready") for m in messages), messages
        blocked = [m for m in messages if m.startswith("fwx serve is NOT ready")]
        assert len(blocked) == 1, messages
        assert "model lin v1 failed: checksum mismatch" in blocked[0]
        # the file is repaired and fwx.json republished (new inode): the poller loads it, the log says so
        for artifact, data in originals.items():
            artifact.write_bytes(data)
        manifest = version / "fwx.json"
        (version / "fwx.json.new").write_bytes(manifest.read_bytes())
        os.replace(version / "fwx.json.new", manifest)
        deadline = time.monotonic() + 30
        while bad.request("GET", "/v2/health/ready").status_code != 200:
            assert time.monotonic() < deadline, "never became ready"
            time.sleep(0.1)
        while not any(r.getMessage().startswith("fwx serve is now ready") for r in caplog.records):
            assert time.monotonic() < deadline, "readiness was never announced"
            time.sleep(0.1)
