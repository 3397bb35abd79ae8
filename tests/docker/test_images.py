"""The built images, run as a user would: read-only root, no capabilities, uid 1000, a mounted repository.

Runs only where images were built for it (``make docker-test`` builds them and sets
``FWX_DOCKER_IMAGES``); elsewhere every test skips. Each image must answer one REST and one gRPC
call exactly as onnxruntime does on the same model bytes, report its sandbox in ``GET /v2``,
hot-reload a new version published into the mounted repository, and on ``docker stop`` finish
the requests in flight and exit 0.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SERVING = str(Path(__file__).resolve().parents[1] / "serving")
if SERVING not in sys.path:
    sys.path.insert(0, SERVING)
import serving_models  # noqa: E402

IMAGES = [i for i in os.environ.get("FWX_DOCKER_IMAGES", "").split(",") if i]
SLEEPY_ITERATIONS = 1_500_000  # ~1.3 s a request here: two requests are still in flight when docker stop lands
# Deadlines, not expectations: a machine loaded many times over (the suite, image builds, `yes`) runs the
# three sleepy requests one after another far slower than ~4 s, and a request cut off by a client deadline
# or by the end of the drain would fail the test for the machine's sake.
DEADLINE_S = 300
BODY = {"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [4.0]}]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _docker(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, timeout=timeout)


def _readable(path: Path) -> None:
    """The container runs as uid 1000: everything it serves must be world-readable."""
    for p in [path, *path.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)


def _publish(repo: Path, name: str, onnx_bytes: bytes, sig: Any, version: int) -> None:
    """Publish beside the repository, make it readable, then move it in whole (the server never sees half)."""
    staging = Path(tempfile.mkdtemp(dir=repo.parent))
    done = serving_models.publish(staging, name, onnx_bytes, sig, version)
    _readable(staging)
    (repo / name).mkdir(exist_ok=True, mode=0o755)
    done.rename(repo / name / str(version))
    shutil.rmtree(staging)


def _linear(bias: float) -> tuple[bytes, Any]:
    """y = 2x + bias (the version's number), so an answer says which version gave it."""
    import onnx

    onnx_bytes, sig = serving_models.build_linear()
    model = onnx.load_from_string(onnx_bytes)
    for init in model.graph.initializer:
        if init.name == "B":
            init.CopyFrom(onnx.numpy_helper.from_array(np.array([bias], np.float32), "B"))
    return model.SerializeToString(), sig


def _runtime_answer(onnx_bytes: bytes) -> list[float]:
    import onnxruntime as ort

    sess = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    return [float(v) for v in sess.run(None, {"x": np.array([[4.0]], np.float32)})[0].ravel()]


class Container:
    def __init__(self, image: str, repo: Path | None, tag: str) -> None:
        self.http, self.grpc = _free_port(), _free_port()
        self.url = f"http://127.0.0.1:{self.http}"
        self.name = f"fwx-test-{tag}-{os.getpid()}-{self.http}"
        mount = ["-v", f"{repo}:/models:ro"] if repo is not None else []
        args = ["--host", "127.0.0.1", "--http-port", str(self.http), "--grpc-port", str(self.grpc)]
        args += ["--poll-seconds", "0.5", "--drain-seconds", str(DEADLINE_S), "--max-batch-size", "1"]
        args += ["--request-timeout-seconds", "0"]  # a loaded machine queues slowly: no deadline to miss
        self.started = time.monotonic()
        _docker(
            "run", "-d", "--name", self.name, "--network", "host", "--read-only", "--tmpfs", "/tmp",
            "--cap-drop", "ALL", "--security-opt", "no-new-privileges", *mount, image, *args,
        )  # fmt: skip

    def wait_ready(self, timeout: float = 240) -> float:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = _docker("inspect", "-f", "{{.State.Running}}", self.name).stdout.strip()
            assert state == "true", self.logs()
            try:
                if httpx.get(f"{self.url}/v2/health/ready", timeout=2).status_code == 200:
                    return time.monotonic() - self.started
            except httpx.HTTPError:
                pass
            time.sleep(0.1)  # the polling interval of a condition with a deadline
        raise AssertionError(f"not ready after {timeout:g} s:\n{self.logs()}")

    def logs(self) -> str:
        out = _docker("logs", self.name, check=False)
        return (out.stdout + out.stderr)[-4000:]

    def remove(self) -> None:
        _docker("rm", "-f", self.name, check=False)


@pytest.fixture
def repo() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="fwx-docker-test-"))
    root.chmod(0o755)
    models = root / "models"
    models.mkdir(mode=0o755)
    try:
        yield models
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _infer(url: str, model: str = "lin") -> tuple[int, Any]:
    import httpx

    r = httpx.post(f"{url}/v2/models/{model}/infer", json=BODY, timeout=DEADLINE_S)
    return r.status_code, r.json()


def _grpc_infer(port: int, model: str = "lin") -> list[float]:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        x = grpcclient.InferInput("x", [1, 1], "FP32")
        x.set_data_from_numpy(np.array([[4.0]], np.float32))
        result = client.infer(model, [x])
        return [float(v) for v in result.as_numpy("y").ravel()]
    finally:
        client.close()


@pytest.mark.skipif(not IMAGES, reason="no images built (make docker-test builds them)")
@pytest.mark.parametrize("image", IMAGES or ["none"])
def test_image_serves_reloads_and_drains_as_uid_1000_on_a_read_only_root(image: str, repo: Path) -> None:
    v1, sig = _linear(1.0)
    _publish(repo, "lin", v1, sig, 1)
    _publish(repo, "sleepy", *serving_models.build_sleepy(SLEEPY_ITERATIONS), 1)
    box = Container(image, repo, "serve")
    try:
        cold = box.wait_ready()
        print(f"\n{image}: ready {cold:.1f} s after docker run")
        assert _docker("inspect", "-f", "{{.Config.User}}", box.name).stdout.strip() == "1000:1000"
        assert _docker("exec", box.name, "id", "-u").stdout.strip() == "1000"

        status, answer = _infer(box.url)
        assert status == 200, answer
        want = _runtime_answer(v1)
        assert answer["outputs"][0]["data"] == want
        assert _grpc_infer(box.grpc) == want

        import httpx

        server = httpx.get(f"{box.url}/v2", timeout=10).json()
        assert server["sandbox"]["on"] is True, server

        v2, _ = _linear(2.0)  # hot reload: a new version appears in the mounted folder
        _publish(repo, "lin", v2, sig, 2)
        deadline = time.monotonic() + 120
        while _infer(box.url)[1].get("model_version") != "2":
            assert time.monotonic() < deadline, box.logs()
            time.sleep(0.1)
        assert _infer(box.url)[1]["outputs"][0]["data"] == _runtime_answer(v2)

        answers: list[Any] = []
        clients = [threading.Thread(target=lambda: answers.append(_infer(box.url, "sleepy")[0])) for _ in range(3)]
        for t in clients:
            t.start()
        serving_models.wait_queued(box.url, 2, timeout=60)  # one running, two queued: in flight at the stop
        stop = _docker("stop", "-t", str(DEADLINE_S + 30), box.name, timeout=DEADLINE_S + 60)
        assert stop.returncode == 0
        for t in clients:
            t.join(DEADLINE_S + 60)
        assert answers == [200, 200, 200]
        state = json.loads(_docker("inspect", "-f", "{{json .State}}", box.name).stdout)
        assert state["ExitCode"] == 0, box.logs()
    finally:
        box.remove()


@pytest.mark.skipif(not IMAGES, reason="no images built (make docker-test builds them)")
def test_the_dockerize_image_serves_the_models_it_bakes_in() -> None:
    baked = os.environ.get("FWX_DOCKERIZE_IMAGE", "")
    if not baked:
        pytest.skip("no fwx dockerize image built")
    box = Container(baked, None, "baked")
    try:
        box.wait_ready()
        status, answer = _infer(box.url)
        assert status == 200, answer
        assert answer["outputs"][0]["data"] == [9.0]  # the baked model: y = 2x + 1
        assert _docker("stop", "-t", "60", box.name, timeout=120).returncode == 0
        assert _docker("inspect", "-f", "{{.State.ExitCode}}", box.name).stdout.strip() == "0"
    finally:
        box.remove()
