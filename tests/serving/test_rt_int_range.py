"""An integer beyond int64 mixed with small ones is read by numpy as float64, where 2**63 equals 2**63 - 1:
it was accepted and wrapped to -2**63. Now it is a 400, and the largest int64 and uint64 values themselves
still arrive exactly (they were wrapped too)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fwx.errors import InputError
from fwx.serving.json_values import numeric_array


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, make_repo: Callable[..., Path], live_server: Any) -> Any:
    repo = make_repo(tmp_path_factory.mktemp("rt") / "repo", {"linear": "linear", "multi": "multi", "text": "text"})
    return live_server(repo, load_probe=False)


def _multi(b: str) -> bytes:
    a = '{"name":"a","shape":[1,3],"datatype":"FP32","data":[1,2,3]}'
    return f'{{"inputs":[{a},{{"name":"b","shape":[1,3],"datatype":"INT64","data":{b}}}]}}'.encode()


@pytest.mark.parametrize("b", ["[1,2,9223372036854775808]", "[1.0,2,9223372036854775808]", "[9.3e18,1,2]"])
def test_an_int64_overflow_beside_small_values_is_a_400_not_a_wrap(srv: Any, b: str) -> None:
    r = srv.request("POST", "/v2/models/multi/infer", content=_multi(b))
    assert r.status_code == 400, r.text
    assert "out of the INT64 range" in r.json()["error"]


def test_the_largest_int64_beside_a_float_is_taken_exactly(srv: Any) -> None:
    r = srv.request("POST", "/v2/models/multi/infer", content=_multi("[1.0,2,9223372036854775807]"))
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("data", "dtype", "want"),
    [
        ([1, 18446744073709551615], "uint64", [1, 2**64 - 1]),
        ([1.0, 9223372036854775807], "int64", [1, 2**63 - 1]),
        ([2.0, -9223372036854775808], "int64", [2, -(2**63)]),
    ],
)
def test_extreme_integers_arrive_exactly(data: list[Any], dtype: str, want: list[int]) -> None:
    assert numeric_array("x", dtype, np.dtype(dtype), data).tolist() == want


@pytest.mark.parametrize(
    ("data", "dtype"),
    [([1, 2, 2**63], "int64"), ([1.0, 1.8446744073709552e19], "uint64"), ([9.223372036854775808e18], "int64")],
)
def test_integers_past_the_range_are_refused(data: list[Any], dtype: str) -> None:
    with pytest.raises(InputError, match="out of the"):
        numeric_array("x", dtype, np.dtype(dtype), data)
