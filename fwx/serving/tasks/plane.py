"""The task plane: what transports call for text in and answers out, beside the tensor data plane.

It reuses the data plane's policies rather than copying them: the same access
check (``infer``), the same refusal while shutting down, the same in-flight
count that drain waits for, the same per-version request statistics, and the
version's ``use()`` count that unload waits for. One generation engine per
served version, created on its first request and dropped with the version.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import weakref
from typing import TYPE_CHECKING, Protocol

from fwx.errors import FwxError, InputError, UnavailableError
from fwx.serving.failures import failure_reason
from fwx.serving.tasks import kserve_generate, seq2seq
from fwx.serving.tasks.assets import (
    AUDIO_TASKS,
    GENERATE,
    IMAGE_TASKS,
    TextAssets,
    assets_of,
    media_task,
    task_of,
    vocabulary,
)
from fwx.serving.tasks.generate import Generation
from fwx.serving.tasks.metrics import GenerationCollector, GenerationStats
from fwx.serving.tasks.protocols import MAX_TOKENS_LIMIT, GenerateCall, Usage
from fwx.serving.tasks.sampling import SamplingParams
from fwx.serving.tasks.scheduler import CacheLayout, Engine, EngineOptions

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from contextlib import AbstractContextManager

    from fwx.serving.batching.hooks import ModelSlot
    from fwx.serving.config import ServerConfig
    from fwx.serving.metrics import Metrics
    from fwx.serving.models import LoadedModel, ModelManager
    from fwx.serving.types import InferRequest, InferResponse


class Policies(Protocol):
    """What the task plane takes from the data plane that owns it (which imports this module, not back)."""

    manager: ModelManager
    metrics: Metrics
    config: ServerConfig

    @property
    def closing(self) -> bool: ...

    def authorize(self, operation: str, auth: str | None) -> None: ...

    def tracked(self) -> AbstractContextManager[None]: ...


class TaskPlane:
    """Generation and text-task inference over one data plane."""

    def __init__(self, dp: Policies, options: EngineOptions | None = None) -> None:
        self.dp = dp
        self.options = options or EngineOptions()
        self._engines: weakref.WeakKeyDictionary[LoadedModel, Engine] = weakref.WeakKeyDictionary()
        self._stats: dict[tuple[str, str], GenerationStats] = {}
        dp.metrics.registry.register(GenerationCollector(self._stats))

    async def model(self, name: str, version: str | None, auth: str | None) -> tuple[LoadedModel, TextAssets]:
        """The served version and its text assets, after the access and shutdown checks inference has."""
        self.dp.authorize("infer", auth)
        if self.dp.closing:
            self.dp.metrics.count_failure("shutting_down")
            raise UnavailableError("the server is shutting down", hint="retry against another replica")
        model = self.dp.manager.get(name, version)
        return model, await asyncio.to_thread(assets_of, model)

    def stats_of(self, name: str, version: str) -> GenerationStats:
        """The generation counters of one served version (or seq2seq export), made on first use."""
        return self._stats.setdefault((name, version), GenerationStats(name, version))

    def engine(self, model: LoadedModel) -> Engine:
        found = self._engines.get(model)
        if found is None:
            stats = self.stats_of(model.name, str(model.version))
            found = Engine(model.runtime, CacheLayout.of(model.signature), self.options, stats)
            self._engines[model] = found
        return found

    async def start(self, call: GenerateCall, auth: str | None) -> Generation:
        """One parsed request, whichever transport and protocol it came in, started on its version's engine.

        The access and shutdown checks, the chat template (rendered in a worker
        thread, sandboxed), and chat's default ``max_tokens`` (what the context
        leaves after the prompt) happen here, so every transport behaves alike.
        """
        from fwx.serving.tasks.chat import render, template_of

        if seq2seq.asks_for(self.dp.manager, call.model):  # NAME of NAME-encoder, -decoder, -decoder-with-past
            return await seq2seq.start(self, call, auth)
        model, assets = await self.model(call.model, call.version, auth)
        prompt: str | list[int] | None = call.prompt
        if call.messages is not None:
            if call.chat_template is not None and not self.dp.config.allow_request_chat_template:
                raise InputError(
                    "this server renders each model's own chat template only; the request sent a chat_template",
                    hint="leave chat_template out, or start fwx serve with --allow-request-chat-template",
                )
            template = template_of(assets, call.chat_template)
            prompt = await asyncio.to_thread(render, template, call.messages, assets)
        if prompt is None:
            raise InputError("the request has neither a prompt nor messages")
        params = call.params
        if call.messages is not None and params.max_tokens == MAX_TOKENS_LIMIT:
            ids = assets.tokenizer.encode(prompt, add_special_tokens=False).ids if isinstance(prompt, str) else prompt
            params = dataclasses.replace(params, max_tokens=max(1, assets.context - len(ids)))
        return await self.generate(model, assets, prompt, params, special=call.messages is None)

    async def generate(
        self,
        model: LoadedModel,
        assets: TextAssets,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        special: bool = True,
    ) -> Generation:
        """Tokenize, check the context, reserve the cache, and start generating (the caller iterates)."""
        if assets.task != GENERATE:
            raise InputError(
                f"model {model.name} is a {assets.task} model; generation needs a text-generation-with-past export",
                hint="export the folder with --task text-generation-with-past",
            )
        ids = prompt if isinstance(prompt, list) else assets.tokenizer.encode(prompt, add_special_tokens=special).ids
        if not ids:
            raise InputError("the prompt is empty after tokenization")
        vocab = vocabulary(model, assets)
        if any(not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab for t in ids):
            raise InputError(f"prompt token ids must be integers in [0, {vocab})")
        budget = assets.context - len(ids)
        if budget < params.max_tokens:
            raise InputError(
                f"the prompt has {len(ids)} tokens and max_tokens is {params.max_tokens}; the model's context "
                f"holds {assets.context}",
                hint=f"shorten the prompt or ask for at most {max(budget, 0)} tokens",
            )
        release = contextlib.ExitStack()
        release.enter_context(self.dp.tracked())
        release.enter_context(model.use())
        try:
            seq = self.engine(model).submit(list(ids), params, assets.eos_ids)
        except BaseException:
            release.close()
            raise
        return Generation(self.engine(model), seq, assets.tokenizer, release, model)

    # ------------------------------------------------------------ OpenAI models
    def openai_models(self, auth: str | None) -> list[dict[str, object]]:
        """``GET /v1/models``: the models ``/v1/completions`` can generate with (their newest ready version),
        since that is what an OpenAI client lists them for; every other model is in the repository index."""
        self.dp.authorize("repository_index", auth)
        out = []
        for name in self.dp.manager.models():
            try:
                model = self.dp.manager.get(name, None)
            except FwxError:  # no version ready: nothing to generate with
                continue
            if task_of(model) == GENERATE:
                out.append(openai_model(name, model))
        out += [openai_model(name, later) for name, later in seq2seq.exports(self.dp.manager)]
        return out

    def openai_fields(self, name: str, version: str | None) -> dict[str, object]:
        """OpenAI's ``Model`` fields for TF Serving's status answer at ``GET /v1/models/{m}`` (the route both
        APIs use; each client ignores the other's fields), for a model ``/v1/models`` lists; any other model's
        status stays TF Serving's own body. Called after the status lookup authorized it."""
        try:
            model = self.dp.manager.get(name, version)
        except FwxError:  # no ready version: TF Serving's status says why, and there is nothing to generate with
            return {}
        return openai_model(name, model) if task_of(model) == GENERATE else {}

    def record(self, gen: Generation, t0: int, failure: str | None) -> None:
        """One finished generation request in the version's request statistics (``failure``: its reason)."""
        slot = gen.model.slot
        if slot is not None:
            slot.stats.record_request(failure is None, time.perf_counter_ns() - t0, failure or "")

    # ------------------------------------------- generation in the tensor form
    def generates(self, request: InferRequest) -> bool:
        """A ``text_input`` request for a version that generates (else it takes the inference path)."""
        if not kserve_generate.is_generation(request):
            return False
        if seq2seq.asks_for(self.dp.manager, request.model_name):
            return True
        try:
            model = self.dp.manager.get(request.model_name, request.model_version)
        except Exception:  # noqa: BLE001 - inference reports the unknown model, counted as usual
            return False
        return self.wants_text(model, request) and task_of(model) == GENERATE

    async def stream_infer(self, request: InferRequest, auth: str | None) -> AsyncIterator[InferResponse]:
        """A generate-form request on a stream (gRPC ``ModelStreamInfer``, decoupled as Triton's LLM backends):
        one response per text delta when it asks for ``stream``, else one with the whole text."""
        call = kserve_generate.call_of(request)
        t0 = time.perf_counter_ns()
        gen = await self.start(call, auth)
        error: BaseException | None = None
        try:
            if not call.stream:
                text, finish = await gen.text()
                yield kserve_generate.response(request, str(gen.model.version), text, finish, _usage(gen))
                return
            async with contextlib.aclosing(gen.deltas()) as deltas:
                async for d in deltas:
                    usage = _usage(gen) if d.finish_reason else None
                    yield kserve_generate.response(request, str(gen.model.version), d.text, d.finish_reason, usage)
        except BaseException as exc:
            error = exc
            raise
        finally:
            self.record(gen, t0, failure_reason(error) if error else None)

    # ------------------------------------------------------------- text tasks
    def wants_text(self, model: LoadedModel, request: InferRequest) -> bool:
        """A KServe v2 request with BYTES inputs (or in the generate form) for a model whose signature takes no
        bytes: the text path."""
        if any(s.dtype == "bytes" for s in model.signature.inputs) or not request.inputs:
            return False
        return kserve_generate.is_generation(request) or all(t.datatype == "BYTES" for t in request.inputs)

    async def infer_text(
        self, model: LoadedModel, slot: ModelSlot, request: InferRequest, deadline: float | None
    ) -> InferResponse:
        """Tokenize (or decode images or audio), batch with the version's other requests, and answer the task (the data
        plane counts it)."""
        from fwx.serving.tasks.textinfer import run_text_task

        task = media_task(model)
        if task in IMAGE_TASKS:
            from fwx.serving.tasks.vision import run_image_task

            return await run_image_task(model, slot, request, deadline)
        if task in AUDIO_TASKS:
            from fwx.serving.tasks.audio import run_audio_task

            return await run_audio_task(model, slot, request, deadline, task)
        assets = await asyncio.to_thread(assets_of, model)
        if assets.task == GENERATE and kserve_generate.is_generation(request):  # ModelInfer: the whole text
            call = kserve_generate.call_of(request)
            assert call.prompt is not None
            gen = await self.generate(model, assets, call.prompt, call.params)
            text, finish = await gen.text()
            return kserve_generate.response(request, str(model.version), text, finish, _usage(gen))
        return await run_text_task(model, slot, assets, request, deadline)


def openai_model(name: str, model: LoadedModel) -> dict[str, object]:
    """One entry of OpenAI's model list: ``created`` is when fwx.json says the version was exported."""
    return {"id": name, "object": "model", "created": _created(model), "owned_by": "fwx"}


def _created(model: LoadedModel) -> int:
    from datetime import datetime

    try:
        return int(datetime.fromisoformat(model.manifest.created).timestamp())
    except (ValueError, TypeError):
        return 0


def _usage(gen: Generation) -> Usage:
    return Usage(gen.prompt_tokens, gen.completion_tokens)
