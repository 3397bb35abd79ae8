"""Framework noise stays off stderr unless --debug: TF/absl C++ lines, gRPC's add_port.cc, uvicorn's own lines,
torch's exporter DeprecationWarning in the digits sample. Real commands in fresh subprocesses."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from fwx.quiet import NOISE

ROOT = Path(__file__).resolve().parents[1]
TF_NOISE = re.compile(r"cuInit|oneDNN|absl::InitializeLog|cudart_stub|cpu_feature_guard|^[IWE]\d{4} ", re.M)
UVICORN = re.compile(
    r"Started server process|Finished server process|Uvicorn running|Waiting for application|^INFO: ", re.M
)


def _env() -> dict[str, str]:
    """The user's environment, minus every quieting variable the test session may have set."""
    drop = ("TF_CPP_MIN_LOG_LEVEL", "GLOG_minloglevel", "GRPC_VERBOSITY", "FWX_DEBUG")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _fwx(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fwx", *args], capture_output=True, text=True, timeout=timeout, env=_env(), cwd=ROOT
    )


def test_noise_pattern_keeps_fatal_and_ordinary_lines() -> None:
    assert NOISE.match(b"E0000 00:00:1796120755.121159   10301 cuda_platform.cc:52] failed call to cuInit")
    assert NOISE.match(b"I0000 00:00:1796120741.103789   10301 port.cc:153] oneDNN custom operations are on.")
    assert NOISE.match(b"E1201 10:23:50.841804    8760 add_port.cc:83] Failed to add port to server")
    assert not NOISE.match(b"F0000 00:00:1796120755.121159   10301 some.cc:52] Check failed: x")
    assert not NOISE.match(b"error: cannot listen for gRPC on 127.0.0.1:8001")
    assert not NOISE.match(b"10:23:54 INFO fwx.serving: fwx serve ready: HTTP 8000, gRPC 8001")


@pytest.mark.slow
@pytest.mark.e2e
def test_tensorflow_lines_only_with_debug(keras_files: dict[str, Path]) -> None:
    args = ["validate", str(keras_files["savedmodel"]), str(keras_files["tflite"])]
    quiet = _fwx(*args)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert not TF_NOISE.search(quiet.stderr), quiet.stderr
    loud = _fwx(*args, "--debug")
    assert loud.returncode == 0, loud.stderr[-3000:]
    assert TF_NOISE.search(loud.stderr), "with --debug the framework lines pass (so this test can fail)"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sys.path.insert(0, str(ROOT / "tests" / "serving"))
    import serving_models

    root = tmp_path_factory.mktemp("quiet") / "repo"
    serving_models.publish(root, "linear", *serving_models.build_linear())
    return root


@pytest.mark.e2e
def test_busy_grpc_port_is_one_line(repo: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = _fwx("serve", str(repo), "--http-port", "0", "--grpc-port", str(port), timeout=120)
    assert res.returncode == 2, res.stderr
    assert "add_port" not in res.stderr
    (line,) = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith(f"error: cannot listen for gRPC on 127.0.0.1:{port}"), line


@pytest.mark.slow
@pytest.mark.e2e
def test_serve_logs_in_one_format_without_uvicorn_lines(repo: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fwx",
            "serve",
            str(repo),
            "--http-port",
            str(port),
            "--grpc-port",
            "0",
            "--poll-seconds",
            "0",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=ROOT,
    )
    try:
        import httpx

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert not UVICORN.search(err), err
    log_lines = [line for line in err.splitlines() if re.match(r"\d\d:\d\d:\d\d ", line)]
    assert any("fwx serve ready" in line for line in log_lines)
    # One format for the supervisor and its workers alike: the logger name carries the process tag.
    one_format = r"\d\d:\d\d:\d\d (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+(\[(supervisor|w\d+)\])?: "
    assert all(re.match(one_format, line) for line in log_lines), err


def test_digits_sample_exports_without_deprecation_warning(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from samples.digits import build_model, export_onnx

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        export_onnx(build_model().eval(), tmp_path / "digits.onnx")
    assert [str(w.message)[:80] for w in seen if issubclass(w.category, DeprecationWarning)] == []
