"""Generation over HTTP equals transformers' ``generate()``: Triton's generate and generate_stream, OpenAI's
completions and chat (streamed and not), for Llama-, Qwen2- and GPT-2-style decoders exported to ONNX, one at a
time and eight at once with different prompt lengths; sampling is reproducible by seed; stop strings, usage."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.serving.tasks import text_models as tm

pytestmark = pytest.mark.slow
TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
DECODERS = ["llama", "qwen2", "gpt2"]
STEPS = 12


@pytest.fixture(scope="module")
def srv(text_repo: tuple[Path, dict[str, Path]], live_server: Callable[..., Any]) -> Any:
    return live_server(text_repo[0], load_probe=False, api_token=TOKEN)


@pytest.fixture(scope="module")
def reference(text_repo: tuple[Path, dict[str, Path]]) -> Callable[[str, str, int], str]:
    memo: dict[tuple[str, str, int], str] = {}

    def ref(model: str, prompt: str, steps: int = STEPS) -> str:
        key = (model, prompt, steps)
        if key not in memo:
            memo[key] = tm.reference_text(text_repo[1][model], prompt, steps)[0]
        return memo[key]

    return ref


def post(srv: Any, path: str, body: dict[str, Any]) -> Any:
    return srv.request("POST", path, json=body, headers=AUTH)


def events(text: str) -> list[Any]:
    out = []
    for block in text.split("\n\n"):
        if block.startswith("data: ") and block != "data: [DONE]":
            out.append(orjson.loads(block[len("data: ") :]))
    return out


@pytest.mark.parametrize("model", DECODERS)
def test_greedy_text_equals_transformers_generate(srv: Any, reference: Any, model: str) -> None:
    prompt = tm.words(20, 31, 42, 53, 64)
    want = reference(model, prompt)
    r = post(srv, f"/v2/models/{model}/generate", {"text_input": prompt, "parameters": {"max_tokens": STEPS}})
    assert r.status_code == 200, r.text
    assert r.json()["text_output"] == want
    r = post(srv, "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": STEPS, "temperature": 0})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["choices"][0]["text"] == want
    assert doc["usage"]["prompt_tokens"] == 5
    assert doc["usage"]["total_tokens"] == 5 + doc["usage"]["completion_tokens"]
    r = post(srv, f"/v2/models/{model}/generate_stream", {"text_input": prompt, "max_tokens": STEPS})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    chunks = events(r.text)
    assert "".join(c["text_output"] for c in chunks) == want
    assert chunks[-1]["finish_reason"] in ("length", "stop")
    body = {"model": model, "prompt": prompt, "max_tokens": STEPS, "temperature": 0, "stream": True}
    r = post(srv, "/v1/completions", {**body, "stream_options": {"include_usage": True}})
    assert r.text.rstrip().endswith("data: [DONE]")
    chunks = events(r.text)
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == want
    assert chunks[-1]["usage"]["prompt_tokens"] == 5


@pytest.mark.parametrize("model", DECODERS)
def test_eight_prompts_of_different_lengths_at_once_each_equal_transformers(
    srv: Any, reference: Any, model: str
) -> None:
    prompts = [tm.words(*range(12 + i, 12 + 2 * i + 1)) for i in range(8)]  # 1 to 8 words

    def make(i: int) -> Callable[[Any], Any]:
        body = {"model": model, "prompt": prompts[i], "max_tokens": STEPS - i, "temperature": 0}
        return lambda client: client.post("/v1/completions", json=body, headers=AUTH)

    async def all_at_once() -> list[Any]:
        import asyncio

        return list(await asyncio.gather(*(make(i)(srv._client) for i in range(8))))

    answers = srv.call(all_at_once())
    for i, r in enumerate(answers):
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == reference(model, prompts[i], STEPS - i), f"prompt {i}"


def test_chat_renders_the_models_template_and_streams_the_same_text(srv: Any, reference: Any) -> None:
    messages = [{"role": "user", "content": tm.words(30, 31, 32)}]
    prompt = f"user: {tm.words(30, 31, 32)} assistant:"  # what the template renders
    body = {"model": "llama", "messages": messages, "max_tokens": 8, "temperature": 0}
    r = post(srv, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["object"] == "chat.completion"
    assert doc["choices"][0]["message"] == {"role": "assistant", "content": reference("llama", prompt, 8)}
    r = post(srv, "/v1/chat/completions", {**body, "stream": True})
    chunks = events(r.text)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant", r.text
    assert (
        "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == doc["choices"][0]["message"]["content"]
    )


def test_sampling_is_reproducible_by_seed(srv: Any) -> None:
    body = {"model": "qwen2", "prompt": tm.words(15, 16), "max_tokens": 10, "temperature": 1.5, "top_k": 20}
    texts = [post(srv, "/v1/completions", {**body, "seed": seed}).json()["choices"][0]["text"] for seed in (7, 7, 8)]
    assert texts[0] == texts[1]
    nucleus = {**body, "top_p": 0.5, "seed": 7}
    assert post(srv, "/v1/completions", nucleus).status_code == 200


def test_a_stop_string_ends_the_text_before_it(srv: Any, reference: Any) -> None:
    prompt = tm.words(20, 31, 42, 53, 64)
    full = reference("gpt2", prompt)
    stop = full.split(" ")[3]
    r = post(
        srv,
        "/v1/completions",
        {"model": "gpt2", "prompt": prompt, "max_tokens": STEPS, "temperature": 0, "stop": [stop]},
    )
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert choice["text"] == full[: full.index(stop)]
    r = post(srv, "/v2/models/gpt2/generate_stream", {"text_input": prompt, "max_tokens": STEPS, "stop": stop})
    assert "".join(c["text_output"] for c in events(r.text)) == full[: full.index(stop)]


def test_generation_needs_the_api_token_and_counts_in_metrics(srv: Any) -> None:
    r = srv.request("POST", "/v1/completions", json={"model": "llama", "prompt": "w20", "max_tokens": 2})
    assert r.status_code == 401
    post(srv, "/v1/completions", {"model": "llama", "prompt": "w20", "max_tokens": 2})
    text = srv.request("GET", "/metrics").text
    assert 'fwx_generate_time_to_first_token_seconds_count{model="llama",version="1"}' in text
    assert 'fwx_generate_inter_token_seconds_count{model="llama",version="1"}' in text
    assert 'fwx_request_success_total{model="llama",version="1"}' in text


def test_curl_streams_generate_stream_events_as_they_come(srv: Any, reference: Any) -> None:
    """``curl -N`` (no output buffering), as Triton's docs call generate_stream: its server-sent events
    carry the same text as transformers' ``generate()``, and a curl without the token gets 401."""
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    prompt = tm.words(20, 31, 42, 53, 64)
    body = orjson.dumps({"text_input": prompt, "parameters": {"max_tokens": STEPS}}).decode()
    url = f"{srv.url}/v2/models/llama/generate_stream"
    cmd = [curl, "-sS", "-N", "-X", "POST", url, "-H", "Content-Type: application/json", "-d", body]
    out = subprocess.run([*cmd, "-H", f"Authorization: Bearer {TOKEN}"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    chunks = events(out.stdout)
    assert len(chunks) > 1  # one event per token, not one body at the end
    assert "".join(c["text_output"] for c in chunks) == reference("llama", prompt)
    denied = subprocess.run(
        [*cmd, "-o", "/dev/null", "-w", "%{http_code}"], capture_output=True, text=True, timeout=120
    )
    assert denied.stdout == "401"
