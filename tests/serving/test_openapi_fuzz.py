"""The served OpenAPI document is valid and complete, and a schemathesis run against it gets no 5xx.

schemathesis generates valid and invalid requests for every operation of
``GET /v2/openapi.json`` (30 examples per operation and mode) and sends them
over HTTP to a real ``fwx serve`` stack (uvicorn, keep-alive, the chunk
guard): every answer must be below 500, and every JSON error a single line.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

MODELS = {"linear": "linear", "multi": "multi", "ints": "ints", "text": "text"}
EXAMPLES = 30


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, make_repo: Callable[..., Path], live_server: Any) -> Any:
    return live_server(
        make_repo(tmp_path_factory.mktemp("openapi") / "repo", MODELS), load_probe=False, request_timeout_s=5
    )


@pytest.fixture(scope="module")
def document(srv: Any) -> dict[str, Any]:
    r = httpx.get(f"{srv.url}/v2/openapi.json", timeout=30)
    assert r.status_code == 200
    return dict(r.json())


def test_document_is_valid_openapi_and_covers_every_route(srv: Any, document: dict[str, Any]) -> None:
    schemathesis.openapi.from_dict(document).validate()  # the OpenAPI 3.1 meta-schema
    documented = {(m.upper(), p) for p, ops in document["paths"].items() for m in ops}
    served = {(m, route.path) for route in srv.server.app.routes for m in (route.methods or ()) if m != "HEAD"}
    assert documented == served
    infer = document["paths"]["/v2/models/{model}/infer"]["post"]["requestBody"]["content"]["application/json"]
    assert infer["schema"]["required"] == ["inputs"]


def _reachable(document: dict[str, Any]) -> dict[str, Any]:
    """The document with path parameters narrowed to names that exist (and one that does not)."""
    doc = copy.deepcopy(document)
    for ops in doc["paths"].values():
        for op in ops.values():
            for param in op.get("parameters", []):
                values = [*MODELS, "nope"] if param["name"] == "model" else ["1", "2", "x"]
                param["schema"] = {"type": "string", "enum": values}
    return doc


def _operations(document: dict[str, Any]) -> list[Any]:
    schema = schemathesis.openapi.from_dict(_reachable(document))
    return [result.ok() for result in schema.get_all_operations()]


@pytest.mark.slow
def test_schemathesis_finds_no_server_error(srv: Any, document: dict[str, Any]) -> None:
    failures: list[str] = []
    for operation in _operations(document):
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategy = operation.as_strategy(generation_mode=mode)

            @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
            @given(case=strategy)
            def run(case: Any) -> None:
                response = case.call(base_url=srv.url, timeout=30)
                problem = _problem(response)
                if problem:
                    failures.append(f"{case.method} {case.formatted_path}: {problem}")

            try:
                run()
            except Unsatisfiable:  # nothing in this operation can be made invalid (no parameter, no body)
                assert mode is GenerationMode.NEGATIVE
    assert failures == [], "\n".join(failures[:20])


def _problem(response: Any) -> str | None:
    if response.status_code >= 500:
        return f"{response.status_code} {response.text[:300]}"
    if response.status_code >= 400 and response.content:
        try:
            error = json.loads(response.content)["error"]
            error = error["message"] if isinstance(error, dict) else error  # OpenAI's shape on /v1
        except (ValueError, KeyError, TypeError):
            return f"{response.status_code} without a JSON error: {response.text[:200]}"
        if "\n" in error:
            return f"multi-line error: {error[:200]}"
    return None
