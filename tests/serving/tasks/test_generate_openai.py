"""The ``openai`` Python package, unmodified, against fwx's ``/v1`` over loopback HTTP: completions and chat,
streamed and not, give transformers' greedy text; usage is counted; fwx's refusals reach the client as the
package's own exception classes (401, 404, 400)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.serving.tasks import text_models as tm

pytestmark = pytest.mark.slow
TOKEN = "s3cret"
STEPS = 10
PROMPT = tm.words(20, 31, 42, 53, 64)


@pytest.fixture(scope="module")
def srv(text_repo: tuple[Path, dict[str, Path]], live_server: Callable[..., Any]) -> Any:
    return live_server(text_repo[0], load_probe=False, api_token=TOKEN)


@pytest.fixture(scope="module")
def client(srv: Any) -> Iterator[Any]:
    with openai.OpenAI(base_url=f"{srv.url}/v1", api_key=TOKEN, max_retries=0, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def reference(text_repo: tuple[Path, dict[str, Path]]) -> Callable[[str, str, int], str]:
    memo: dict[tuple[str, str, int], str] = {}

    def ref(model: str, prompt: str, steps: int) -> str:
        if (model, prompt, steps) not in memo:
            memo[model, prompt, steps] = tm.reference_text(text_repo[1][model], prompt, steps)[0]
        return memo[model, prompt, steps]

    return ref


@pytest.mark.parametrize("model", ["llama", "gpt2"])
def test_completions_with_the_openai_package(client: Any, reference: Any, model: str) -> None:
    want = reference(model, PROMPT, STEPS)
    done = client.completions.create(model=model, prompt=PROMPT, max_tokens=STEPS, temperature=0)
    assert done.choices[0].text == want
    assert done.choices[0].finish_reason in ("length", "stop")
    assert done.usage.prompt_tokens == 5
    assert done.usage.total_tokens == 5 + done.usage.completion_tokens
    parts, usage = [], None
    with client.completions.create(
        model=model, prompt=PROMPT, max_tokens=STEPS, temperature=0, stream=True, stream_options={"include_usage": True}
    ) as stream:
        for chunk in stream:  # read to the end: the package closes the response itself
            parts += [c.text for c in chunk.choices]
            usage = chunk.usage or usage
    assert "".join(parts) == want
    assert usage is not None
    assert usage.completion_tokens == done.usage.completion_tokens


def test_chat_with_the_openai_package(client: Any, reference: Any) -> None:
    messages = [{"role": "user", "content": tm.words(30, 31, 32)}]
    want = reference("llama", f"user: {tm.words(30, 31, 32)} assistant:", 8)
    done = client.chat.completions.create(model="llama", messages=messages, max_tokens=8, temperature=0)
    assert done.object == "chat.completion"
    assert done.choices[0].message.role == "assistant"
    assert done.choices[0].message.content == want
    roles, parts = [], []
    with client.chat.completions.create(
        model="llama", messages=messages, max_tokens=8, temperature=0, stream=True
    ) as stream:
        for chunk in stream:
            for choice in chunk.choices:
                roles.append(choice.delta.role)
                parts.append(choice.delta.content or "")
    assert roles[0] == "assistant"
    assert "".join(parts) == want


def test_sampling_by_seed_with_the_openai_package(client: Any) -> None:
    texts = [
        client.completions.create(
            model="qwen2", prompt=tm.words(15, 16), max_tokens=8, temperature=1.5, top_p=0.9, seed=seed
        )
        .choices[0]
        .text
        for seed in (7, 7)
    ]
    assert texts[0] == texts[1]


def test_refusals_reach_the_openai_package_as_its_own_errors(srv: Any, client: Any) -> None:
    stranger = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="wrong", max_retries=0)
    with stranger, pytest.raises(openai.AuthenticationError, match="token"):
        stranger.completions.create(model="llama", prompt="w20", max_tokens=2)
    with pytest.raises(openai.NotFoundError, match="no-such-model"):
        client.completions.create(model="no-such-model", prompt="w20", max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        client.completions.create(model="llama", prompt=PROMPT, max_tokens=10**9)
    with pytest.raises(openai.BadRequestError, match="context"):
        client.completions.create(model="llama", prompt=PROMPT, max_tokens=100_000)
    assert client.completions.create(model="llama", prompt=PROMPT, max_tokens=2, temperature=0).choices[0].text
    with pytest.raises(openai.BadRequestError, match="presence_penalty"):  # not applied: refused, not ignored
        client.completions.create(model="llama", prompt=PROMPT, max_tokens=2, presence_penalty=1.0)
    neutral = {"frequency_penalty": 0, "presence_penalty": 0.0, "logit_bias": {}}  # what some clients always send
    assert client.completions.create(model="llama", prompt=PROMPT, max_tokens=2, temperature=0, **neutral).choices


def test_a_request_template_is_refused_unless_the_server_allows_it(client: Any) -> None:
    # any client could otherwise make the server render its own Jinja (this server is started without
    # --allow-request-chat-template; the sandboxed render is tested with it in test_generate_limits.py)
    messages = [{"role": "user", "content": tm.words(30, 31, 32)}]
    with pytest.raises(openai.BadRequestError, match="--allow-request-chat-template"):
        client.chat.completions.create(
            model="llama", messages=messages, max_tokens=2, extra_body={"chat_template": "{{ messages[0].content }}"}
        )
    assert client.chat.completions.create(model="llama", messages=messages, max_tokens=2, temperature=0).choices
