"""The two generation protocols as plain dicts: OpenAI's completions and chat, and Triton's generate.

Parsing makes one typed ``GenerateCall`` of a request body (every field
checked, a 400 naming the first bad one); encoding makes the bodies and stream
chunks each protocol's clients expect. Nothing here knows HTTP.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fwx.errors import FwxError, InputError
from fwx.serving.tasks.sampling import SamplingParams

MAX_TOKENS_LIMIT = 1 << 20


@dataclass(frozen=True)
class GenerateCall:
    """One generation request, whichever protocol it came in."""

    model: str
    version: str | None
    prompt: str | list[int] | None
    messages: list[dict[str, str]] | None
    params: SamplingParams
    stream: bool
    include_usage: bool = False
    chat_template: str | None = None


def _num(doc: Mapping[str, Any], key: str, kind: type, default: Any) -> Any:
    value = doc.get(key, default)
    if value is None:
        return default
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or (kind is int and not float(value).is_integer()):
        raise InputError(f"'{key}' must be a {'whole number' if kind is int else 'number'}, not {value!r}"[:200])
    return kind(value)


def _stops(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise InputError("'stop' must be a string or a list of strings")
    return tuple(s for s in items if s)


#: Settings fwx does not apply, with the value that changes nothing: any other value is a 400, not ignored
#: (an ignored penalty silently gives other text than the client asked for).
NOT_APPLIED: dict[str, tuple[Any, ...]] = {
    "frequency_penalty": (0,),
    "presence_penalty": (0,),
    "repetition_penalty": (1,),
    "logit_bias": ({},),
}


def flag(doc: Mapping[str, Any], name: str) -> bool:
    """A true/false setting (absent or null: false); anything else is a 400, not read as false."""
    value = doc.get(name)
    if value is not None and not isinstance(value, bool):
        raise InputError(f"'{name}' must be true or false, not {value!r}"[:200])
    return value is True


def sampling(doc: Mapping[str, Any], *, default_temperature: float, default_max: int) -> SamplingParams:
    """Decoding settings from a body (OpenAI names; ``top_k``, ``ignore_eos`` as vLLM adds them)."""
    for name, neutral in NOT_APPLIED.items():
        if doc.get(name) is not None and doc.get(name) not in neutral:
            raise InputError(f"{name} is not applied by fwx", hint=f"leave it out (or send {neutral[0]!r})")
    max_tokens = _num(doc, "max_tokens", int, None)
    if max_tokens is None:
        max_tokens = _num(doc, "max_completion_tokens", int, default_max)
    if not 1 <= max_tokens <= MAX_TOKENS_LIMIT:
        raise InputError(f"max_tokens must be between 1 and {MAX_TOKENS_LIMIT}, not {max_tokens}")
    if _num(doc, "n", int, 1) != 1:
        raise InputError("'n' must be 1", hint="send one request per completion")
    temperature = _num(doc, "temperature", float, default_temperature)
    seed = _num(doc, "seed", int, None)
    greedy = temperature == 0.0
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=temperature if not greedy else 1.0,
        top_p=_num(doc, "top_p", float, 1.0),
        top_k=max(_num(doc, "top_k", int, 0), 0),
        seed=seed,
        greedy=greedy,
        stop=_stops(doc.get("stop", doc.get("stop_words"))),
        ignore_eos=flag(doc, "ignore_eos"),
    )


def _object(doc: Any) -> Mapping[str, Any]:
    if not isinstance(doc, dict):
        raise InputError("the request body must be a JSON object")
    return doc


def _model(doc: Mapping[str, Any]) -> str:
    model = doc.get("model")
    if not isinstance(model, str) or not model:
        raise InputError("'model' must name a served model")
    return model


def _prompt(value: Any) -> str | list[int]:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, list)):
        value = value[0]
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        return list(value)
    raise InputError("'prompt' must be a string (or one list of token ids)", hint="send one prompt per request")


def _usage_flag(doc: Mapping[str, Any]) -> bool:
    opts = doc.get("stream_options")
    return isinstance(opts, dict) and opts.get("include_usage") is True


def completions(doc: Any) -> GenerateCall:
    """``POST /v1/completions``."""
    d = _object(doc)
    if d.get("echo") or d.get("logprobs") or d.get("suffix") or d.get("best_of") not in (None, 1):
        raise InputError("echo, logprobs, suffix and best_of are not supported")
    params = sampling(d, default_temperature=1.0, default_max=16)
    return GenerateCall(_model(d), None, _prompt(d.get("prompt")), None, params, flag(d, "stream"), _usage_flag(d))


def chat(doc: Any) -> GenerateCall:
    """``POST /v1/chat/completions``."""
    from fwx.serving.tasks.chat import messages_of

    d = _object(doc)
    if d.get("logprobs") or d.get("tools"):
        raise InputError("logprobs and tools are not supported")
    params = sampling(d, default_temperature=1.0, default_max=MAX_TOKENS_LIMIT)
    template = d.get("chat_template")
    if template is not None and not isinstance(template, str):
        raise InputError("'chat_template' must be a string")
    return GenerateCall(
        _model(d), None, None, messages_of(d.get("messages")), params, flag(d, "stream"), _usage_flag(d), template
    )


def triton(doc: Any, model: str, version: str | None, *, stream: bool) -> GenerateCall:
    """Triton's generate extension: ``text_input`` and settings at the top level or under ``parameters``."""
    d = dict(_object(doc))
    params = d.pop("parameters", None) or {}
    if not isinstance(params, dict):
        raise InputError("'parameters' must be an object")
    merged = {**d, **params}
    text = merged.get("text_input")
    if not isinstance(text, str):
        raise InputError("'text_input' must be a string")
    settings = sampling(merged, default_temperature=0.0, default_max=16)
    return GenerateCall(model, version, text, None, settings, stream)


# ------------------------------------------------------------------ encoding
@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    def to_json(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


class OpenAIEncoder:
    """Bodies and stream chunks for one completion or chat completion."""

    def __init__(self, model: str, is_chat: bool) -> None:
        self.model = model
        self.chat = is_chat
        self.id = f"{'chatcmpl' if is_chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def _head(self, chunk: bool) -> dict[str, Any]:
        kind = "chat.completion" if self.chat else "text_completion"
        if self.chat and chunk:
            kind += ".chunk"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def body(self, text: str, finish: str, usage: Usage) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": None}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        return {**self._head(False), "choices": [choice], "usage": usage.to_json()}

    def chunk(self, text: str, finish: str | None, *, first: bool = False) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": None}
        if self.chat:
            delta: dict[str, Any] = {"content": text} if text or not finish else {}
            if first:
                delta = {"role": "assistant", "content": text}
            choice["delta"] = delta
        else:
            choice["text"] = text
        return {**self._head(True), "choices": [choice]}

    def usage_chunk(self, usage: Usage) -> dict[str, Any]:
        return {**self._head(True), "choices": [], "usage": usage.to_json()}


def triton_body(model: str, version: str, text: str, finish: str | None, usage: Usage | None) -> dict[str, Any]:
    """A generate answer (or stream event): Triton's ``text_output``, with fwx's finish reason and usage."""
    doc: dict[str, Any] = {"model_name": model, "model_version": version, "text_output": text}
    if finish is not None:
        doc["finish_reason"] = finish
    if usage is not None:
        doc["usage"] = usage.to_json()
    return doc


#: OpenAI's error ``type`` by HTTP status (what its client libraries show beside the message).
_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable_error",
}


def openai_error(exc: FwxError) -> dict[str, Any]:
    """OpenAI's error body: its clients read ``error.message`` (a plain string there shows only the status)."""
    kind = _OPENAI_TYPES.get(exc.http_status, "server_error" if exc.http_status >= 500 else "invalid_request_error")
    return {"error": {"message": str(exc), "type": kind, "param": None, "code": None}}
