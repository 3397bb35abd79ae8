"""Every REST body is checked against its JSON Schema before use: a malformed one is a 400 naming the field.

The compiled checker (``fwx.serving.rest.schema``) is held to the ``jsonschema``
library on generated documents, so the schema shipped in the OpenAPI document
is the rule the server applies.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fwx.errors import InputError
from fwx.serving.rest import schema

GOOD = {"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [4.0]}]}

MALFORMED: list[tuple[str, dict[str, Any], str]] = [
    ("/v2/models/linear/infer", {**GOOD, "outputs": 5}, "outputs must be an array, got integer"),
    ("/v2/models/linear/infer", {**GOOD, "outputs": [5]}, "outputs[0] must be an object, got integer"),
    ("/v2/models/linear/infer", {**GOOD, "outputs": [{}]}, "outputs[0].name is required"),
    (
        "/v2/models/linear/infer",
        {**GOOD, "outputs": [{"name": "y", "parameters": []}]},
        "outputs[0].parameters must be an object, got array",
    ),
    ("/v2/models/linear/infer", {**GOOD, "parameters": 5}, "parameters must be an object, got integer"),
    ("/v2/models/linear/infer", {**GOOD, "parameters": {"a": {"b": 1}}}, "parameters.a must be a string or"),
    ("/v2/models/linear/infer", {**GOOD, "id": 5}, "id must be a string, got integer"),
    ("/v2/models/linear/infer", {"inputs": {"x": 1}}, "inputs must be an array, got object"),
    (
        "/v2/models/linear/infer",
        {"inputs": [{**GOOD["inputs"][0], "shape": [1, "1"]}]},
        "inputs[0].shape[1] must be an integer, got string",
    ),
    (
        "/v2/models/linear/infer",
        {"inputs": [{**GOOD["inputs"][0], "shape": [1.5]}]},
        "inputs[0].shape[0] must be an integer, got number",
    ),
    (
        "/v2/models/linear/infer",
        {"inputs": [{**GOOD["inputs"][0], "datatype": "FLOAT"}]},
        "inputs[0].datatype must be one of",
    ),
    ("/v2/models/linear/infer", {"inputs": [{**GOOD["inputs"][0], "name": 3}]}, "inputs[0].name must be a string"),
    ("/v2/models/linear/infer", {"inputs": [{**GOOD["inputs"][0], "data": None}]}, "inputs[0].data must be an array"),
    ("/v1/models/linear:predict", {"instances": 5}, "instances must be an array, got integer"),
    ("/v1/models/linear:predict", {"instances": [[4.0]], "signature_name": 1}, "signature_name must be a string"),
    ("/v2/repository/index", {"ready": "yes"}, "ready must be a boolean, got string"),
]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, make_repo: Callable[..., Path], live_server: Any) -> Any:
    return live_server(make_repo(tmp_path_factory.mktemp("schema") / "repo", {"linear": "linear"}), load_probe=False)


@pytest.mark.parametrize(("path", "body", "fragment"), MALFORMED, ids=[m[2][:40] for m in MALFORMED])
def test_malformed_body_is_400_naming_the_field(srv: Any, path: str, body: dict[str, Any], fragment: str) -> None:
    r = srv.request("POST", path, content=json.dumps(body))
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert fragment in error, error
    assert "\n" not in error


def test_keep_alive_survives_a_malformed_body(srv: Any) -> None:
    """Over a real socket: the 400 keeps the connection, the next request on it is answered."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.server.http_port, timeout=30)
    try:
        conn.request("POST", "/v2/models/linear/infer", body=json.dumps({**GOOD, "outputs": 5}))
        bad = conn.getresponse()
        assert bad.status == 400
        assert b"outputs" in bad.read()
        sock = conn.sock
        conn.request("POST", "/v2/models/linear/infer", body=json.dumps(GOOD))
        good = conn.getresponse()
        assert good.status == 200
        assert json.loads(good.read())["outputs"][0]["data"] == [9.0]
        assert conn.sock is sock  # the same TCP connection: no reset
    finally:
        conn.close()


# ---------------------------------------------------------------------------- checker == jsonschema
_INT_ONLY = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
    "integer", lambda _checker, v: isinstance(v, int) and not isinstance(v, bool)
)
_Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=_INT_ONLY)

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.floats(allow_nan=False, width=32)
    | st.sampled_from(["x", "y", "", "FP32", "INT64", "BYTES", "FLOAT"])
)
_keys = st.sampled_from(
    [
        "name",
        "shape",
        "datatype",
        "data",
        "parameters",
        "inputs",
        "outputs",
        "id",
        "binary_data_size",
        "instances",
        "signature_name",
        "ready",
        "other",
    ]
)
_json = st.recursive(
    _scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=4), max_leaves=12
)


def _near(valid: dict[str, Any]) -> Any:
    """Documents close to a valid one: each field replaced by generated JSON, or left alone."""
    return st.fixed_dictionaries({}, optional={k: st.just(v) | _json for k, v in valid.items()} | {"other": _json})


_TENSOR = {"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0], "parameters": {"a": 1}}
_SCHEMAS = [
    (
        schema.INFER_REQUEST,
        schema.check_infer_request,
        _near({"inputs": [_TENSOR], "outputs": [{"name": "y"}], "id": "1", "parameters": {"p": True}})
        | st.fixed_dictionaries({"inputs": st.lists(_near(_TENSOR) | _json, max_size=2)}),
    ),
    (
        schema.TF_PREDICT_REQUEST,
        schema.check_tf_predict_request,
        _near({"instances": [[1.0]], "inputs": {"x": [1]}, "signature_name": "serving_default"}),
    ),
    (schema.INDEX_REQUEST, schema.check_index_request, _near({"ready": True})),
]


@pytest.mark.parametrize(("doc_schema", "check", "docs"), _SCHEMAS, ids=["infer", "tf_predict", "index"])
def test_compiled_checker_agrees_with_jsonschema(doc_schema: dict[str, Any], check: Any, docs: Any) -> None:
    validator = _Validator(doc_schema)

    @settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(docs | _json)
    def agree(doc: Any) -> None:
        expected = validator.is_valid(doc)
        refused: str | None = None
        try:
            check(doc)
        except InputError as exc:
            refused = str(exc)
        if expected:
            assert refused is None, f"checker refused a valid document: {refused}"
        else:
            assert refused is not None, (
                f"checker accepted an invalid document: {next(validator.iter_errors(doc)).message}"
            )
            assert "\n" not in refused

    agree()


def test_a_client_field_name_with_a_newline_stays_on_one_line() -> None:
    # the decoder fuzz found it: a parameter named "a\nb" split the 400 message in two
    with pytest.raises(InputError) as info:
        schema.check_infer_request({**GOOD, "parameters": {"a\nb": {}}})
    assert "\n" not in str(info.value)
    assert "parameters.a\\nb must be" in str(info.value)
