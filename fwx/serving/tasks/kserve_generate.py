"""Generation in the KServe v2 / Triton tensor form: ``text_input`` in, ``text_output`` out.

This is how Triton's LLM backends take generation over ``ModelInfer`` and,
decoupled, over gRPC's ``ModelStreamInfer``: a ``BYTES`` input ``text_input``
(one prompt), settings as scalar inputs or request parameters with the
generate extension's names (``max_tokens``, ``temperature``, ``top_p``,
``top_k``, ``seed``, ``stop``, ``stream``), and a ``BYTES`` output
``text_output``. A streamed request gets one response per text delta; the last
carries ``finish_reason``, the usage counts and ``triton_final_response``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fwx.errors import InputError
from fwx.serving.tasks.protocols import GenerateCall, Usage, sampling
from fwx.serving.tasks.tokenize import texts_of
from fwx.serving.types import InferRequest, InferResponse, InferTensor

TEXT_INPUT = "text_input"
TEXT_OUTPUT = "text_output"


def is_generation(request: InferRequest) -> bool:
    """A request in the generate form (the model decides whether it can generate)."""
    return any(t.name == TEXT_INPUT and t.datatype == "BYTES" for t in request.inputs)


def _scalar(t: InferTensor) -> Any:
    if t.data.size != 1:
        raise InputError(f"input {t.name!r} must hold one value, not {t.data.size}")
    if t.datatype == "BYTES":
        return texts_of(t.data, t.name)[0]
    value = t.data.reshape(-1)[0].item()
    return bool(value) if t.datatype == "BOOL" else value


def call_of(request: InferRequest) -> GenerateCall:
    """The request as one ``GenerateCall``: the prompt, and settings from its scalar inputs and parameters."""
    by_name = {t.name: t for t in request.inputs}
    prompts = texts_of(by_name[TEXT_INPUT].data, TEXT_INPUT)
    if len(prompts) != 1:
        raise InputError(f"'{TEXT_INPUT}' must hold one prompt, not {len(prompts)}", hint="send one request each")
    settings = {k: v for k, v in request.parameters.items() if not k.startswith("triton_")}
    settings.update({name: _scalar(t) for name, t in by_name.items() if name != TEXT_INPUT})
    stream = settings.pop("stream", False)
    if not isinstance(stream, bool):
        raise InputError("'stream' must be a boolean")
    params = sampling(settings, default_temperature=0.0, default_max=16)
    return GenerateCall(request.model_name, request.model_version, prompts[0], None, params, stream)


def response(request: InferRequest, version: str, text: str, finish: str | None, usage: Usage | None) -> InferResponse:
    """One answer (or one delta of a stream): ``text_output``; the last one says why it ended and counts."""
    data = np.empty(1, dtype=object)
    data[0] = text.encode()
    params: dict[str, Any] = {"triton_final_response": finish is not None}
    if finish is not None:
        params["finish_reason"] = finish
    if usage is not None:
        params |= {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens}
    out = InferTensor(TEXT_OUTPUT, "BYTES", [1], data)
    return InferResponse(request.model_name, version, [out], id=request.id, parameters=params)
