"""OpenAI's model list and retrieve with the ``openai`` package, unmodified: ``/v1/models`` lists the models
``/v1/completions`` generates with; ``GET /v1/models/{m}`` stays TF Serving's status, with OpenAI's fields
beside it for those models."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest

pytestmark = pytest.mark.slow
TOKEN = "s3cret"
GENERATORS = {"llama", "qwen2", "gpt2"}


@pytest.fixture(scope="module")
def srv(text_repo: tuple[Path, dict[str, Path]], live_server: Callable[..., Any]) -> Any:
    return live_server(text_repo[0], load_probe=False, api_token=TOKEN)


def test_list_and_retrieve_with_the_openai_package(srv: Any) -> None:
    with openai.OpenAI(base_url=f"{srv.url}/v1", api_key=TOKEN, max_retries=0, timeout=60) as client:
        models = list(client.models.list())
        assert {m.id for m in models} == GENERATORS  # the BERT task models take text but do not generate
        assert all(m.object == "model" and m.owned_by == "fwx" and m.created > 1_600_000_000 for m in models)
        got = client.models.retrieve("llama")
        assert (got.id, got.object, got.owned_by) == ("llama", "model", "fwx")
        with pytest.raises(openai.NotFoundError):
            client.models.retrieve("nope")
    wrong = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="wrong", max_retries=0, timeout=60)
    with wrong, pytest.raises(openai.AuthenticationError):
        wrong.models.list()


def test_the_status_route_keeps_tf_servings_shape(srv: Any) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    status = srv.request("GET", "/v1/models/llama", headers=auth).json()
    assert status["model_version_status"] == [
        {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
    ]
    assert status["id"] == "llama"
    bert = srv.request("GET", "/v1/models/bert/versions/1", headers=auth).json()
    assert set(bert) == {"model_version_status"}  # not an OpenAI model: TF Serving's body alone
