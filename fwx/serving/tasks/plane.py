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

from fwx.errors import InputError, UnavailableError
from fwx.serving.tasks.assets import GENERATE, TextAssets, assets_of
from fwx.serving.tasks.generate import Generation
from fwx.serving.tasks.metrics import GenerationCollector, GenerationStats
from fwx.serving.tasks.protocols import MAX_TOKENS_LIMIT, GenerateCall
from fwx.serving.tasks.sampling import SamplingParams
from fwx.serving.tasks.scheduler import CacheLayout, Engine, EngineOptions

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from fwx.serving.batching.hooks import ModelSlot
    from fwx.serving.metrics import Metrics
    from fwx.serving.models import LoadedModel, ModelManager
    from fwx.serving.types import InferRequest, InferResponse


class Policies(Protocol):
    """What the task plane takes from the data plane that owns it (which imports this module, not back)."""

    manager: ModelManager
    metrics: Metrics

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

    def engine(self, model: LoadedModel) -> Engine:
        found = self._engines.get(model)
        if found is None:
            stats = self._stats.setdefault(
                (model.name, str(model.version)), GenerationStats(model.name, str(model.version))
            )
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

        model, assets = await self.model(call.model, call.version, auth)
        prompt: str | list[int] | None = call.prompt
        if call.messages is not None:
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
        vocab = _vocabulary(model, assets)
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

    def record(self, gen: Generation, t0: int, failure: str | None) -> None:
        """One finished generation request in the version's request statistics (``failure``: its reason)."""
        slot = gen.model.slot
        if slot is not None:
            slot.stats.record_request(failure is None, time.perf_counter_ns() - t0, failure or "")

    # ------------------------------------------------------------- text tasks
    def wants_text(self, model: LoadedModel, request: InferRequest) -> bool:
        """A KServe v2 request with BYTES inputs for a model whose signature takes no bytes: the text path."""
        if not request.inputs or any(t.datatype != "BYTES" for t in request.inputs):
            return False
        return not any(s.dtype == "bytes" for s in model.signature.inputs)

    async def infer_text(
        self, model: LoadedModel, slot: ModelSlot, request: InferRequest, deadline: float | None
    ) -> InferResponse:
        """Tokenize, batch with the version's other requests, and answer the task (the data plane counts it)."""
        from fwx.serving.tasks.textinfer import run_text_task

        assets = await asyncio.to_thread(assets_of, model)
        return await run_text_task(model, slot, assets, request, deadline)


def _vocabulary(model: LoadedModel, assets: TextAssets) -> int:
    """Rows of the embedding table: the logits' last dimension, else the config's ``vocab_size``."""
    logits = next((s for s in model.signature.outputs if s.name == "logits"), None)
    last = logits.shape[-1] if logits is not None and logits.shape else None
    if isinstance(last, int) and last > 0:
        return last
    size = assets.config.get("vocab_size")
    return size if isinstance(size, int) and size > 0 else 2**31
