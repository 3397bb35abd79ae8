"""Generation requests that were a 500 with a traceback: a negative ``seed`` (numpy's generator refused it
after the request was accepted) and a chat text part whose ``text`` is not a string (the join failed). Each is
now one 400 naming the field, on every protocol that reads it, and the server keeps serving."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.serving.tasks import text_models as tm

pytestmark = pytest.mark.slow
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, live_server: Callable[..., Any]) -> Any:
    repo, _ = tm.export(tmp_path_factory.mktemp("rt_gen"), ["llama"])
    return live_server(repo, load_probe=False)


@pytest.mark.parametrize(
    ("path", "body", "says"),
    [
        ("/v1/completions", {"model": "llama", "prompt": "w20", "max_tokens": 2, "seed": -1}, "seed"),
        ("/v2/models/llama/generate", {"text_input": "w20", "max_tokens": 2, "temperature": 1, "seed": -5}, "seed"),
        (CHAT, {"model": "llama", "messages": [{"role": "user", "content": "x"}], "seed": -1}, "seed"),
        (CHAT, {"model": "llama", "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, "text"),
        (CHAT, {"model": "llama", "messages": [{"role": "user", "content": [{"type": "text"}]}]}, "text"),
    ],
)
def test_bad_generation_fields_are_one_400(srv: Any, path: str, body: dict[str, Any], says: str) -> None:
    r = srv.request("POST", path, json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    message = error["message"] if isinstance(error, dict) else error
    assert says in message
    ok = srv.request("POST", "/v1/completions", json={"model": "llama", "prompt": "w20", "max_tokens": 2, "seed": 7})
    assert ok.status_code == 200, ok.text


def test_text_parts_still_join(srv: Any) -> None:
    parts = [
        {"type": "text", "text": "w20 "},
        {"type": "image_url", "image_url": {"url": "x"}},
        {"type": "text", "text": "w21"},
    ]
    body = {"model": "llama", "messages": [{"role": "user", "content": parts}], "max_tokens": 2, "temperature": 0}
    r = srv.request("POST", CHAT, json=body)
    assert r.status_code == 200, r.text
