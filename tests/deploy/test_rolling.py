"""A rolling restart behind a real load balancer loses nothing.

Three ``fwx serve`` replicas over one shared repository behind nginx (retries
to the next upstream on connect errors, timeouts and 503, POST included).
Under steady load each replica is replaced the way the generated Deployment
does it (``maxSurge: 1, maxUnavailable: 0``): start the replacement, wait
until it is ready, swap it into the upstream list (an endpoints update) while
SIGTERM goes to the old one. A new model version is published mid-way.
Every request must succeed, every answer must come from a version that
existed (the model answers ``x + 100 * version``, so the numbers prove it),
and every replica must serve the new version within two poll periods.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import serving_models
from fleet import Fleet, Nginx, nginx_binary

from fwx.signature import Signature, TensorSpec

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(150)]

POLL_S = 1.5
SERVE_ARGS = [
    "--poll-seconds",
    str(POLL_S),
    "--shutdown-delay-seconds",
    "1",
    "--drain-seconds",
    "10",
    "--no-load-probe",
    "--max-queue-delay-seconds",
    "0",
    "--log-level",
    "warning",
]
CLIENTS = 3
MAX_REQUESTS = 20_000  # bound on the load, whatever the machine's speed
MAX_LOAD_S = 80.0


def _offset_model(version: int) -> tuple[bytes, Signature]:
    """y = x + 100 * version: an answer names the version that computed it."""
    _, h, T = serving_models._helper()
    g = h.make_graph(
        [h.make_node("Gemm", ["x", "W", "B"], ["y"])],
        "offset",
        [h.make_tensor_value_info("x", T.FLOAT, ["N", 1])],
        [h.make_tensor_value_info("y", T.FLOAT, ["N", 1])],
        [
            serving_models._init("W", np.array([[1.0]], np.float32)),
            serving_models._init("B", np.array([100.0 * version], np.float32)),
        ],
    )
    sig = Signature((TensorSpec("x", "float32", ("N", 1)),), (TensorSpec("y", "float32", ("N", 1)),))
    return serving_models._model(g), sig


class Load:
    """CLIENTS threads sending steady, bounded POST /infer through nginx; every answer is checked."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.sent = 0
        self.failures: list[str] = []
        self.versions: dict[str, int] = {}
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(CLIENTS)]

    def __enter__(self) -> Load:
        self.started = time.monotonic()
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(40)

    def _run(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        # A new client->nginx connection per request: an nginx reload closes idle keep-alive client
        # connections of its old workers, a race of our stand-in for an endpoints update (ingress-nginx
        # updates endpoints without a reload). nginx->replica connections stay keep-alive: that is the
        # hop whose shutdown behaviour is under test.
        limits = httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(base_url=self.url, timeout=30, limits=limits) as client:
            while not self.stop.is_set() and time.monotonic() - self.started < MAX_LOAD_S:
                with self.lock:
                    if self.sent >= MAX_REQUESTS:
                        return
                    self.sent += 1
                x = float(rng.integers(0, 10))
                body = {"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [x]}]}
                self._check(client, x, body)
                time.sleep(0.005)

    def _check(self, client: httpx.Client, x: float, body: dict[str, Any]) -> None:
        try:
            r = client.post("/v2/models/offset/infer", content=json.dumps(body))
        except httpx.HTTPError as exc:
            self._fail(f"transport: {exc!r}")
            return
        if r.status_code != 200:
            self._fail(f"{r.status_code}: {r.text[:200]}")
            return
        doc = r.json()
        version = doc["model_version"]
        y = doc["outputs"][0]["data"][0]
        if version not in ("1", "2") or y != x + 100 * int(version):
            self._fail(f"answer {y} for x={x} from version {version}")
            return
        with self.lock:
            self.versions[version] = self.versions.get(version, 0) + 1

    def _fail(self, what: str) -> None:
        with self.lock:
            self.failures.append(what)


def _served_version(url: str) -> str | None:
    body = {"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [0.0]}]}
    try:
        return str(
            httpx.post(f"{url}/v2/models/offset/infer", content=json.dumps(body), timeout=5).json()["model_version"]
        )
    except (httpx.HTTPError, KeyError, ValueError):
        return None


def test_rolling_restart_and_new_version_lose_nothing(tmp_path: Path) -> None:
    binary = nginx_binary()
    if binary is None:
        if os.environ.get("FWX_REQUIRE_TOOLS"):
            pytest.fail("nginx is not installed (make test-deps installs it)")
        pytest.skip("nginx is not installed (apt-get install nginx)")
    repo = tmp_path / "repo"
    serving_models.publish(repo, "offset", *_offset_model(1))
    fleet = Fleet(repo, tmp_path, SERVE_ARGS)
    nginx = Nginx(tmp_path, binary)
    try:
        live = [fleet.start() for _ in range(3)]
        for r in live:
            r.wait_ready()
        nginx.start([r.port for r in live])
        convergence_s = None
        with Load(nginx.url) as load:
            time.sleep(1.0)
            for i in range(3):
                if i == 1:  # mid-way: a new version lands in the shared repository
                    published = time.monotonic()
                    serving_models.publish(repo, "offset", *_offset_model(2))
                    while any(_served_version(r.url) != "2" for r in live):
                        # a deadline, not a measurement: replicas poll every POLL_S (the figure is printed)
                        assert time.monotonic() - published < 120, [_served_version(r.url) for r in live]
                        time.sleep(0.05)
                    convergence_s = time.monotonic() - published
                old = live[0]
                new = fleet.start()
                new.wait_ready()
                live = [*live[1:], new]
                nginx.set_upstreams([r.port for r in live])  # endpoints update and SIGTERM at the same time
                old.proc.send_signal(signal.SIGTERM)
                assert old.proc.wait(30) == 0, old.log.read_text()[-2000:]
            time.sleep(1.0)
        assert load.sent >= 200, f"too little load to prove anything: {load.sent}"
        assert load.failures == [], f"{len(load.failures)} of {load.sent} failed: {load.failures[:5]}"
        assert load.versions.get("1", 0) > 0, load.versions
        assert load.versions.get("2", 0) > 0, load.versions
        assert convergence_s is not None
        for r in live:
            assert _served_version(r.url) == "2"
            assert f'fwx_server_info{{replica="{r.name}"' in httpx.get(f"{r.url}/metrics").text
        print(
            f"\nrolling: {load.sent} requests, 0 failed, versions {load.versions}, "
            f"{nginx.retried()} retried by nginx, all replicas on v2 {convergence_s:.2f}s after publish"
        )
    finally:
        nginx.stop()
        fleet.stop_all()
