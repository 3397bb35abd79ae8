"""--api-token on inference routes; model control off by default, token-guarded when on."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

BODY = json.dumps({"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [4.0]}]})


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, make_repo: Callable[..., Path]) -> Path:
    return make_repo(tmp_path_factory.mktemp("auth") / "repo", {"linear": "linear"})


def test_api_token_guards_inference(repo: Path, live_server: Any) -> None:
    srv = live_server(repo, load_probe=False, api_token="s3cret")
    assert srv.request("POST", "/v2/models/linear/infer", content=BODY).status_code == 401
    wrong = srv.request("POST", "/v2/models/linear/infer", content=BODY, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert "token" in wrong.json()["error"]
    ok = srv.request("POST", "/v2/models/linear/infer", content=BODY, headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200
    tf = srv.request("POST", "/v1/models/linear:predict", content=json.dumps({"instances": [[4.0]]}))
    assert tf.status_code == 401
    assert srv.request("GET", "/v2/models/linear").status_code == 401
    assert srv.request("GET", "/v2/health/ready").status_code == 200  # probes stay open
    assert srv.request("GET", "/metrics").status_code == 200


def test_model_control_disabled_by_default(repo: Path, live_server: Any) -> None:
    srv = live_server(repo, load_probe=False)
    r = srv.request("POST", "/v2/repository/models/linear/unload", headers={"Authorization": "Bearer x"})
    assert r.status_code == 403
    assert "disabled" in r.json()["error"]
    index = srv.request("POST", "/v2/repository/index", content=b'{"ready": true}').json()
    assert index == [{"name": "linear", "version": "1", "state": "READY", "reason": ""}]


def test_model_control_needs_the_admin_token(repo: Path, live_server: Any) -> None:
    srv = live_server(repo, load_probe=False, enable_model_control=True, admin_token="adm")
    assert srv.request("POST", "/v2/repository/models/linear/unload").status_code == 401
    bad = srv.request("POST", "/v2/repository/models/linear/unload", headers={"Authorization": "Bearer no"})
    assert bad.status_code == 401
    ok = srv.request("POST", "/v2/repository/models/linear/unload", headers={"Authorization": "Bearer adm"})
    assert ok.status_code == 200
    gone = srv.request("POST", "/v2/models/linear/infer", content=BODY)
    assert gone.status_code == 503  # unloaded: known to the repository, no version ready
    assert "no version ready" in gone.json()["error"]
    assert (
        srv.request("POST", "/v2/repository/models/linear/load", headers={"Authorization": "Bearer adm"}).status_code
        == 200
    )
    assert srv.request("POST", "/v2/models/linear/infer", content=BODY).json()["outputs"][0]["data"] == [9.0]
    traversal = srv.request("POST", "/v2/repository/models/..%2F..%2Fetc/load", headers={"Authorization": "Bearer adm"})
    assert traversal.status_code == 404  # %2F decodes to '/': no route matches, nothing is looked up
