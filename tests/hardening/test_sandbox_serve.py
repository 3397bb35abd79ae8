"""``fwx serve`` under the sandbox: its workers load every version inside Landlock, from a private copy.

The hostile case switches the scanners off on purpose in every process of the
server (a ``sitecustomize`` on the test's PYTHONPATH replaces
``fwx.safety.check_model`` with a no-op), then serves a SavedModel whose
signature writes a sentinel file and returns a secret file's bytes. Warm-up and
every request run that signature: the kernel refuses both, nothing is written,
no secret byte comes back, and the server stays up and says why the version
did not load.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fwx.manifest import ArtifactEntry, Manifest, SourceInfo, sha256_path, size_of
from fwx.repository import Repository
from fwx.safety import landlock
from fwx.signature import Signature, TensorSpec

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(landlock.abi_version() < 1, reason="the kernel offers no Landlock"),
]
ROOT = Path(__file__).resolve().parents[2]
SECRET = "fwx-served-secret-91d3"
BYPASS = "import fwx.safety\nfwx.safety.check_model = lambda *args, **kwargs: None\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _publish(repo: Path, name: str, folder: Path, sig: Signature) -> None:
    import shutil

    with Repository(repo).staging(name, None) as st:
        shutil.copytree(folder, st.path / "model.savedmodel")
        art = st.path / "model.savedmodel"
        entry = ArtifactEntry(
            format="savedmodel",
            path="model.savedmodel",
            sha256=sha256_path(art),
            size_bytes=size_of(art),
            signature=sig.to_json(),
            tool_versions={"tensorflow": "test"},
        )
        source = SourceInfo(path="(built in test)", sha256="", format="savedmodel", framework="tensorflow")
        st.publish(Manifest(name=name, version=0, source=source, signature=sig.to_json(), artifacts={"sm": entry}))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tf = pytest.importorskip("tensorflow")
    base = tmp_path_factory.mktemp("served")
    secret, sentinel = base / "host" / "secret.txt", base / "sentinel"
    secret.parent.mkdir()
    secret.write_text(SECRET)
    sentinel.mkdir()
    target, source = str(sentinel / "pwned"), str(secret)

    class Thief(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
        def serve(self, x: Any) -> Any:
            tf.io.write_file(target, "pwned")
            stolen = tf.strings.unicode_decode(tf.io.read_file(source), "UTF-8")
            return {"y": x * 2.0 + tf.cast(tf.reduce_sum(stolen), tf.float32)}

    class Good(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
        def serve(self, x: Any) -> Any:
            return {"y": x * 2.0}

    sig = Signature((TensorSpec("x", "float32", (-1, 2)),), (TensorSpec("y", "float32", (-1, 2)),))
    repo = base / "repo"
    for name, mod in (("thief", Thief()), ("good", Good())):
        tf.saved_model.save(mod, str(base / name), signatures={"serving_default": mod.serve})
        _publish(repo, name, base / name, sig)
    hook = base / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(BYPASS)
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": f"{hook}:{ROOT}", "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    cmd = [sys.executable, "-m", "fwx", "serve", str(repo), "--http-port", str(port), "--grpc-port", "-1"]
    cmd += ["--poll-seconds", "0", "--require-sandbox", "--no-load-probe"]
    log = base / "serve.log"
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=base)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{url}/v2/models/good/ready", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    yield {"url": url, "sentinel": sentinel, "log": log, "proc": proc}
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_workers_say_they_are_sandboxed(served: dict[str, Any]) -> None:
    meta = httpx.get(f"{served['url']}/v2", timeout=5).json()
    assert meta["sandbox"]["on"] is True, served["log"].read_text()
    metrics = httpx.get(f"{served['url']}/metrics", timeout=5).text
    assert 'fwx_sandbox_enabled{landlock_abi="' in metrics
    assert [ln for ln in metrics.splitlines() if ln.startswith("fwx_sandbox_enabled")][0].endswith(" 1.0")
    walls = {ln.split('"')[1]: ln.rsplit(" ", 1)[1] for ln in metrics.splitlines() if ln.startswith("fwx_wall_up{")}
    assert walls == dict.fromkeys(meta["walls"]["walls"], "1.0"), metrics  # every wall /v2 lists, each up
    assert {"landlock", "network", "proc", "memory"} <= walls.keys()


def test_the_hostile_version_never_escapes(served: dict[str, Any]) -> None:
    url = served["url"]
    good = httpx.post(
        f"{url}/v2/models/good/infer",
        json={"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]},
        timeout=30,
    )
    assert good.status_code == 200, good.text
    assert good.json()["outputs"][0]["data"] == [2.0, 4.0]
    thief = httpx.post(
        f"{url}/v2/models/thief/infer",
        json={"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]},
        timeout=30,
    )
    assert thief.status_code != 200  # its warm-up was refused by the kernel: the version is not served
    assert list(served["sentinel"].iterdir()) == []
    everything = thief.text + served["log"].read_text()
    assert SECRET not in everything
    assert "warm-up inference failed" in thief.text  # the signature ran (the scanner was off) and the kernel said no
