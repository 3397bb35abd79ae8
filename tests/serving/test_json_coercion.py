"""JSON values are never silently coerced: null, "4", 1e300 for FP32, 1.5 for INT64, data plus binary -> 400."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fwx.errors import InputError
from fwx.serving.json_values import numeric_array


def _v2(model: str, datatype: str, data: Any, **extra: Any) -> tuple[str, dict[str, Any]]:
    return f"/v2/models/{model}/infer", {
        "inputs": [{"name": "x", "shape": [1, 1], "datatype": datatype, "data": data, **extra}]
    }


REFUSED: list[tuple[str, tuple[str, Any], str]] = [
    ("FP32 null", _v2("linear", "FP32", [None]), "FP32 data holds a null"),
    ("FP32 string", _v2("linear", "FP32", ["4"]), "FP32 data holds a null, a string"),
    ("FP32 overflow", _v2("linear", "FP32", [1e300]), "out of the FP32 range"),
    ("FP32 bool", _v2("linear", "FP32", [True]), "FP32 data holds true/false"),
    ("INT64 fraction", _v2("ints", "INT64", [1.5]), "INT64 data holds a non-integer value"),
    ("INT64 overflow", _v2("ints", "INT64", [2**70]), "INT64"),
    ("INT64 string", _v2("ints", "INT64", ["4"]), "INT64 data holds a null, a string"),
    (
        "binary and data",
        _v2("linear", "FP32", [4.0], parameters={"binary_data_size": 4}),
        "has both 'data' and a binary_data_size",
    ),
    ("TF FP32 null", ("/v1/models/linear:predict", {"instances": [[None]]}), "float32 data holds a null"),
    ("TF FP32 string", ("/v1/models/linear:predict", {"instances": [["4"]]}), "float32 data holds a null, a string"),
    ("TF FP32 overflow", ("/v1/models/linear:predict", {"instances": [[1e300]]}), "out of the float32 range"),
    ("TF INT64 fraction", ("/v1/models/ints:predict", {"instances": [[1.5]]}), "int64 data holds a non-integer"),
]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, make_repo: Callable[..., Path], live_server: Any) -> Any:
    repo = make_repo(tmp_path_factory.mktemp("coerce") / "repo", {"linear": "linear", "ints": "ints"})
    return live_server(repo, load_probe=False)


@pytest.mark.parametrize(("case", "request_", "fragment"), REFUSED, ids=[r[0] for r in REFUSED])
def test_coercion_is_refused_naming_the_tensor(srv: Any, case: str, request_: tuple[str, Any], fragment: str) -> None:
    path, body = request_
    r = srv.request("POST", path, content=json.dumps(body))
    assert r.status_code == 400, (case, r.text)
    error = r.json()["error"]
    assert "input 'x'" in error, error
    assert fragment in error, error


def test_exact_values_still_decode(srv: Any) -> None:
    path, body = _v2("ints", "INT64", [2.0])  # an integral float is a whole number
    assert srv.request("POST", path, content=json.dumps(body)).json()["outputs"][0]["data"] == [3]
    path, body = _v2("ints", "INT64", [2**62])
    assert srv.request("POST", path, content=json.dumps(body)).json()["outputs"][0]["data"] == [2**62 + 1]
    path, body = _v2("linear", "FP32", [3.4e38])
    assert srv.request("POST", path, content=json.dumps(body)).status_code == 200


@pytest.mark.parametrize(("dtype", "data"), [("uint8", [300]), ("uint8", [-1]), ("int8", [128]), ("float16", [1e5])])
def test_narrow_dtypes_refuse_wrapping(dtype: str, data: list[Any]) -> None:
    with pytest.raises(InputError, match="out of the"):
        numeric_array("x", dtype, np.dtype(dtype), data)
