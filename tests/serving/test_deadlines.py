"""The request ``timeout`` parameter is Triton's (µs); ``timeout_ms`` is the separate ms spelling."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fwx.errors import InputError
from fwx.serving.deadlines import timeout_seconds


def test_units() -> None:
    assert timeout_seconds({}) is None
    assert timeout_seconds({"timeout": 250_000}) == pytest.approx(0.25)
    assert timeout_seconds({"timeout_ms": 250}) == pytest.approx(0.25)
    assert timeout_seconds({"timeout": 2_000_000, "timeout_ms": 500}) == pytest.approx(0.5)  # the earliest wins
    for bad in ({"timeout": "soon"}, {"timeout": -1}, {"timeout_ms": True}):
        with pytest.raises(InputError, match="must be a non-negative number"):
            timeout_seconds(bad)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, make_repo: Callable[..., Path], live_server: Any) -> Any:
    # one run of "sleepy" takes ~0.1 s or more: far longer than 5 ms, far shorter than 5 s
    repo = make_repo(tmp_path_factory.mktemp("deadlines") / "repo", {"sleepy": "sleepy"})
    return live_server(repo, load_probe=False, grpc_port=0)


def _input(mod: Any) -> Any:
    x = mod.InferInput("x", [1, 1], "FP32")
    x.set_data_from_numpy(np.ones((1, 1), np.float32))
    return x


@pytest.mark.slow
def test_tritonclient_timeout_is_microseconds(srv: Any) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    http = httpclient.InferenceServerClient(srv.url.removeprefix("http://"))
    grpc = grpcclient.InferenceServerClient(srv.grpc_url)
    # 5_000 µs = 5 ms: the run takes far longer, so 504 / DEADLINE_EXCEEDED (read as ms it would be 5 s)
    with pytest.raises(InferenceServerException) as err:
        http.infer("sleepy", [_input(httpclient)], timeout=5_000)
    assert "deadline" in str(err.value)
    with pytest.raises(InferenceServerException) as err:
        grpc.infer("sleepy", [_input(grpcclient)], timeout=5_000)
    assert err.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    with pytest.raises(InferenceServerException):
        http.infer("sleepy", [_input(httpclient)], parameters={"timeout_ms": 5})
    ok = http.infer("sleepy", [_input(httpclient)], timeout=30_000_000)  # 30 s
    assert ok.as_numpy("y").tolist() == [[1.0]]
