"""A BYTES tensor whose shape claims far more elements than its data holds (JSON ``data`` or the binary
extension) is a 400 before the server allocates one slot per claimed element: a 100-byte request with shape
[2**30] used to allocate an 8 GiB object array first (and [2**31] was a 500 MemoryError)."""

from __future__ import annotations

import json
import struct
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fwx.errors import InputError
from fwx.serving.codecs import decode_json_data, decode_raw

CLAIMED = 2**24  # an object array of this many slots is 128 MiB


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, make_repo: Callable[..., Path], live_server: Any) -> Any:
    repo = make_repo(tmp_path_factory.mktemp("rt") / "repo", {"linear": "linear", "multi": "multi", "text": "text"})
    return live_server(repo, load_probe=False)


def _peak(call: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match="input 's'"):
            call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    "call",
    [
        lambda: decode_json_data("s", "BYTES", [CLAIMED], ["x"]),
        lambda: decode_raw("s", "BYTES", [CLAIMED], struct.pack("<I", 1) + b"x"),
    ],
    ids=["json", "binary"],
)
def test_a_bytes_shape_that_lies_is_refused_before_allocating(call: Callable[[], Any]) -> None:
    assert _peak(call) < 8 * 2**20


def test_a_lying_bytes_shape_over_rest_is_one_400_and_the_server_serves_on(srv: Any) -> None:
    body = {"inputs": [{"name": "s", "shape": [CLAIMED], "datatype": "BYTES", "data": ["x"]}]}
    r = srv.request("POST", "/v2/models/text/infer", content=json.dumps(body))
    assert r.status_code == 400
    assert "needs 16777216 elements, data has 1" in r.json()["error"]
    blob = struct.pack("<I", 1) + b"x"
    head = json.dumps(
        {"inputs": [{"name": "s", "shape": [CLAIMED], "datatype": "BYTES", "parameters": {"binary_data_size": 5}}]}
    ).encode()
    r = srv.request(
        "POST",
        "/v2/models/text/infer",
        content=head + blob,
        headers={"Inference-Header-Content-Length": str(len(head))},
    )
    assert r.status_code == 400
    assert "needs at least 67108864 bytes" in r.json()["error"]
    ok = {"inputs": [{"name": "s", "shape": [2], "datatype": "BYTES", "data": ["a", "b"]}]}
    r = srv.request("POST", "/v2/models/text/infer", content=json.dumps(ok))
    assert r.status_code == 200
    assert r.json()["outputs"][0]["data"] == ["a", "b"]
