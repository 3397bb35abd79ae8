"""KServe v2 inference with text in: tokenize, run through the version's batcher, answer the task.

Inputs are BYTES tensors (MLServer's convention): any one input name for the
single-text tasks (``args``, ``text_inputs``, ``input-0``, ...), ``question``
and ``context`` for question answering. The answer is one BYTES output named
``output`` holding one JSON document per text, with MLServer's
``content_type: hg_jsonlist`` parameter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from fwx.errors import InputError
from fwx.serving.tasks import postprocess as post
from fwx.serving.tasks.assets import GENERATE, TextAssets
from fwx.serving.tasks.tokenize import encode, tensors, texts_of
from fwx.serving.types import InferRequest, InferResponse, InferTensor

if TYPE_CHECKING:
    from fwx.serving.batching.hooks import ModelSlot
    from fwx.serving.models import LoadedModel


def _inputs(assets: TextAssets, request: InferRequest) -> tuple[list[str], list[str] | None]:
    by_name = {t.name: t for t in request.inputs}
    if assets.task == "question-answering":
        if "question" not in by_name or "context" not in by_name:
            raise InputError("question answering takes two BYTES inputs, 'question' and 'context'")
        questions = texts_of(by_name["question"].data, "question")
        contexts = texts_of(by_name["context"].data, "context")
        if len(questions) == 1 < len(contexts):
            questions *= len(contexts)
        if len(questions) != len(contexts):
            raise InputError(f"{len(questions)} questions for {len(contexts)} contexts", hint="send one per context")
        return questions, contexts
    if len(request.inputs) != 1:
        raise InputError(f"task {assets.task} takes one BYTES input of texts, not {len(request.inputs)}")
    return texts_of(request.inputs[0].data, request.inputs[0].name), None


def _answers(
    assets: TextAssets, out: dict[str, np.ndarray], encs: list[Any], feeds: dict[str, Any], ctx: Any
) -> list[Any]:
    task = assets.task
    if task == "text-classification":
        return post.classify(assets, np.asarray(out["logits"]))
    if task == "token-classification":
        return post.entities(assets, np.asarray(out["logits"]), encs)
    if task == "fill-mask":
        return post.fill_mask(assets, np.asarray(out["logits"]), encs)
    if task == "question-answering":
        return post.answers(np.asarray(out["start_logits"]), np.asarray(out["end_logits"]), encs, ctx)
    return [{"embedding": e} for e in post.embeddings(np.asarray(out["last_hidden_state"]), feeds["attention_mask"])]


async def run_text_task(
    model: LoadedModel, slot: ModelSlot, assets: TextAssets, request: InferRequest, deadline: float | None
) -> InferResponse:
    """The task's answers for the request's texts, one JSON document each."""
    if assets.task == GENERATE:
        raise InputError(
            f"model {model.name} generates text",
            hint=f"send one BYTES input 'text_input', or use POST /v2/models/{model.name}/generate or /v1/completions",
        )
    texts, contexts = _inputs(assets, request)
    encs = encode(assets, texts, contexts)  # question first, context second: its sequence id is 1
    feeds = tensors(assets, encs, model.signature.input_names)
    outputs = await slot.batcher.submit(feeds, len(encs), deadline)
    return jsonlist(model, request, _answers(assets, dict(outputs), encs, feeds, contexts))


def jsonlist(model: LoadedModel, request: InferRequest, answers: list[Any]) -> InferResponse:
    """One JSON document per input in one BYTES output ``output``, marked as MLServer marks it."""
    docs = [orjson.dumps(a) for a in answers]
    data = np.empty(len(docs), dtype=object)
    data[:] = docs
    tensor = InferTensor("output", "BYTES", [len(docs)], data, {"content_type": "hg_jsonlist"})
    return InferResponse(model.name, str(model.version), [tensor], id=request.id)
