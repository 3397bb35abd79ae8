"""A version whose warm-up outputs contradict its pinned signature is refused, with one reason everywhere.

The ONNX model returns ``y`` shaped ``[N, 1]`` (``y = 2x + 1``); fwx.json is made
to pin another shape. Served anyway, clients got a shape the metadata denies.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import serving_models

from fwx.signature import Signature, TensorSpec

X = TensorSpec("x", "float32", ("N", 1))
LIES = {
    "wide": (TensorSpec("y", "float32", ("N", 3)), "output 'y' came back [1,1]; fwx.json pins [N,3]"),
    "deep": (TensorSpec("y", "float32", ("N", 1, 1)), "output 'y' came back [1,1]; fwx.json pins [N,1,1]"),
    "fixed": (TensorSpec("y", "float32", (2, 1)), "output 'y' came back [1,1]; fwx.json pins [2,1]"),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, live_server: Callable[..., Any]) -> Any:
    repo = tmp_path_factory.mktemp("lies") / "repo"
    onnx_bytes, good = serving_models.build_linear()
    serving_models.publish(repo, "linear", onnx_bytes, good)
    for name, (out, _) in LIES.items():
        serving_models.publish(repo, name, onnx_bytes, Signature((X,), (out,)))
    return live_server(repo, load_probe=False)


@pytest.mark.parametrize("name", sorted(LIES))
def test_a_version_whose_outputs_contradict_its_signature_is_failed_with_the_reason(server: Any, name: str) -> None:
    reason = LIES[name][1]
    rows = {r["name"]: r for r in server.request("POST", "/v2/repository/index", json={}).json()}
    assert rows[name]["state"] == "FAILED"
    assert reason in rows[name]["reason"], rows[name]["reason"]
    assert server.request("GET", f"/v2/models/{name}/ready").status_code == 400
    meta = server.request("GET", f"/v2/models/{name}")
    assert meta.status_code in (400, 404, 503)
    assert reason in meta.json()["error"], meta.json()
    assert server.request("GET", "/v2/health/ready").status_code == 400
    body = {"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [4.0]}]}
    assert server.request("POST", f"/v2/models/{name}/infer", json=body).status_code != 200


def test_the_honest_model_still_serves(server: Any) -> None:
    body = {"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [4.0]}]}
    r = server.request("POST", "/v2/models/linear/infer", json=body)
    assert r.status_code == 200
    assert r.json()["outputs"][0]["data"] == [9.0]


def test_the_not_ready_line_names_the_reason(
    tmp_path: Path, live_server: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    repo = tmp_path / "repo"
    onnx_bytes, _ = serving_models.build_linear()
    serving_models.publish(repo, "wide", onnx_bytes, Signature((X,), (LIES["wide"][0],)))
    with caplog.at_level(logging.INFO, logger="fwx.serving"):
        live_server(repo, load_probe=False)
    not_ready = [r.getMessage() for r in caplog.records if "NOT ready" in r.getMessage()]
    assert len(not_ready) == 1
    assert LIES["wide"][1] in not_ready[0]
