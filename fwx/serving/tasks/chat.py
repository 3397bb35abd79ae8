"""Chat messages to a prompt through the model's chat template, rendered only in Jinja's immutable sandbox.

A chat template is untrusted model data (or, with ``chat_template`` in the
request, untrusted client data): it is rendered in
``ImmutableSandboxedEnvironment``, which refuses attribute access to Python
internals and any mutation of the values it is given, with a bounded output.
Whatever a template does wrong is one 400 naming it; the server keeps serving.
"""

from __future__ import annotations

import functools
from typing import Any

from fwx.errors import InputError
from fwx.serving.tasks import template_walls as walls
from fwx.serving.tasks.assets import TextAssets

MAX_MESSAGES = 256
MAX_TEMPLATE_CHARS = 64 * 1024
MAX_PROMPT_CHARS = 4 * 2**20


def template_of(assets: TextAssets, override: Any = None) -> str:
    """The request's template, else the version's chat_template.jinja, else its tokenizer config's (a string,
    or the one named ``default``)."""
    found = override if override is not None else assets.chat_template or assets.tokenizer_config.get("chat_template")
    if isinstance(found, list):
        named = {t.get("name"): t.get("template") for t in found if isinstance(t, dict)}
        found = named.get("default")
    if not isinstance(found, str) or not found:
        raise InputError(
            "the model has no chat template",
            hint="use /v1/completions with a prompt, or send chat_template "
            "(to a server started with --allow-request-chat-template)",
        )
    if len(found) > MAX_TEMPLATE_CHARS:
        raise InputError(f"the chat template is over {MAX_TEMPLATE_CHARS} characters")
    return found


def messages_of(raw: Any) -> list[dict[str, str]]:
    """OpenAI messages as plain ``{role, content}`` strings (text parts joined)."""
    if not isinstance(raw, list) or not raw or len(raw) > MAX_MESSAGES:
        raise InputError(f"'messages' must be a list of 1 to {MAX_MESSAGES} messages")
    out = []
    for i, msg in enumerate(raw):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise InputError(f"messages[{i}] must be an object with a 'role'")
        content = msg.get("content")
        if isinstance(content, list):
            texts: list[Any] = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
            if not all(isinstance(t, str) for t in texts):
                raise InputError(f"messages[{i}].content: a text part's 'text' must be a string")
            content = "".join(texts)
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise InputError(f"messages[{i}].content must be a string or a list of text parts")
        out.append({"role": msg["role"], "content": content})
    return out


def _token(assets: TextAssets, key: str) -> str:
    value = assets.tokenizer_config.get(key)
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""


@functools.lru_cache(maxsize=1)
def _environment() -> Any:
    """The sandbox, set up as transformers renders chat templates (trim, lstrip, loop controls), except that
    a value the sandbox refused fails the render instead of printing as nothing. Built once: it holds no
    request's state, and Jinja renders from one environment on many threads."""
    from jinja2 import TemplateError, Undefined
    from jinja2.exceptions import SecurityError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Refused(Undefined):
        def _check(self) -> None:
            if self._undefined_exception is SecurityError:
                self._fail_with_undefined_error()

        def __str__(self) -> str:
            self._check()
            return super().__str__()

        def __bool__(self) -> bool:
            self._check()
            return super().__bool__()

        def __iter__(self) -> Any:
            self._check()
            return super().__iter__()

    class Bounded(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "+", "%"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            walls.check_binop(operator, left, right)
            return super().call_binop(context, operator, left, right)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
            walls.check_call(__obj, args, kwargs)
            return super().call(__context, __obj, *args, **kwargs)

        def wrap_str_format(self, value: Any) -> Any:  # the sandbox's own str.format, reached by attribute
            walls.check_format(getattr(value, "__self__", None))
            return super().wrap_str_format(value)

    env = Bounded(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"], undefined=Refused)
    env.filters = walls.bounded_filters(env.filters)
    env.globals["namespace"] = walls.bounded_namespace()

    def raise_exception(message: str) -> None:
        raise TemplateError(str(message))

    env.globals["raise_exception"] = raise_exception
    return env


@functools.lru_cache(maxsize=16)
def _compiled(template: str) -> Any:
    """A template compiled once (a version's own is the same string on every request)."""
    return _environment().from_string(template)


def render(template: str, messages: list[dict[str, str]], assets: TextAssets) -> str:
    """The prompt text the template makes of ``messages``, ending with the assistant's turn."""
    from jinja2 import TemplateError

    try:
        compiled = _compiled(template)
        text = walls.render_bounded(
            lambda: compiled.render(
                messages=messages,
                add_generation_prompt=True,
                bos_token=_token(assets, "bos_token"),
                eos_token=_token(assets, "eos_token"),
            )
        )
    except TemplateError as exc:
        raise InputError(
            f"the chat template failed: {type(exc).__name__}: {str(exc)[:200]}",
            hint="the sandbox refuses access to Python objects; fix the template or send a prompt",
        ) from None
    except (TypeError, ValueError, ArithmeticError, LookupError, RecursionError, MemoryError) as exc:
        raise InputError(f"the chat template failed: {type(exc).__name__}: {str(exc)[:200]}") from None
    if len(text) > MAX_PROMPT_CHARS:
        raise InputError("the chat template made a prompt over 4 Mi characters")
    return str(text)
