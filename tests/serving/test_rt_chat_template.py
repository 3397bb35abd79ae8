"""A chat template (the model's, or a request's own ``chat_template``) cannot hold a thread or ask one C call
for gigabytes: Jinja's sandbox bounds ``range`` alone, so two nested loops ran for hours and ``'a' * 10**10``,
``center(10**10)`` or ``9 ** (9 ** 9)`` were built in full before the prompt limit could look. Each is now one
400 naming what was refused, the ordinary things templates do still render, and over HTTP the server answers
the next request.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from fwx.errors import InputError
from fwx.serving.tasks.chat import render
from fwx.serving.tasks.template_walls import RENDER_SECONDS
from tests.serving.tasks import text_models as tm

WAIT_S = 60 + RENDER_SECONDS
MESSAGES = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]


@dataclass
class Assets:
    tokenizer_config: dict[str, Any] = field(default_factory=lambda: {"bos_token": "<s>", "eos_token": "</s>"})


def rendered(template: str) -> str | BaseException:
    """The render's text or its exception, in a daemon thread: a render that never ends fails the test."""
    out: list[str | BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            out.append(render(template, MESSAGES, Assets()))  # type: ignore[arg-type]
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out.append(exc)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(WAIT_S), f"the render of {template!r} did not end"
    return out[0]


HOSTILE = {
    "nested loops": ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "ran over"),
    "lipsum": ("{{ lipsum(10**6) }}", "ran over"),
    "power": ("{{ 9 ** (9 ** 9) }}", "bits"),
    "repetition": ("{{ 'a' * 10**10 }}", "repetition"),
    "center": ("{{ 'a'|center(10**10) }}", "10000000000"),
    "batch fill": ("{{ [1]|batch(10**9, 'x')|list }}", "1000000000"),
    "percent width": ("{{ '%0999999999d' % 1 }}", "format string"),
    "format width": ("{{ '{:999999999}'.format(1) }}", "format string"),
    "format filter": ("{{ '%*s'|format(10**9, 'a') }}", "1000000000"),
    "namespace doubling": (
        "{% set ns = namespace(s='a') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        "namespace",
    ),
    "macro doubling": (
        "{% macro f(s, n) %}{% if n %}{{ f(s ~ s, n - 1) }}{% endif %}{% endmacro %}{{ f('a', 40) }}",
        "items",
    ),
    "replace": ("{{ ('a' * 4000000)|replace('a', 'aaaaaaaaaa') }}", "replace"),
    "str.replace": ("{{ ('a' * 4000000).replace('a', 'aaaaaaaaaa') }}", "replace"),
}


@pytest.mark.parametrize(("template", "says"), list(HOSTILE.values()), ids=list(HOSTILE))
def test_a_costly_template_is_one_clear_error(template: str, says: str) -> None:
    got = rendered(template)
    assert isinstance(got, InputError), got
    assert "the chat template failed" in str(got)
    assert says in str(got)


def test_what_chat_templates_do_still_renders() -> None:
    template = (
        "{{ bos_token }}{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
        "{{ '<|' + m['role'] + '|>' }}{{ m['content'] | trim }}{{ '%s' % eos_token }}{% endfor %}"
        "{{ '{}:{}'.format(ns.n, 2 ** 10) }}{{ 'ab' * 2 }}{{ 'x'|center(5) }}{{ messages|tojson|length > 0 }}"
        "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
    )
    assert rendered(template) == "<s><|user|>hi</s><|assistant|>yo</s>2:1024abab  x  True<|assistant|>"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, live_server: Callable[..., Any]) -> Any:
    repo, _ = tm.export(tmp_path_factory.mktemp("rt_tpl"), ["llama"])
    return live_server(repo, load_probe=False, allow_request_chat_template=True)


@pytest.mark.slow
def test_a_request_template_that_never_ends_is_a_400_and_the_server_serves_on(srv: Any) -> None:
    body = {"model": "llama", "messages": MESSAGES, "max_tokens": 2, "chat_template": HOSTILE["nested loops"][0]}
    r = srv.request("POST", "/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    assert "ran over" in r.json()["error"]["message"]
    del body["chat_template"]
    assert srv.request("POST", "/v1/chat/completions", json=body).status_code == 200
