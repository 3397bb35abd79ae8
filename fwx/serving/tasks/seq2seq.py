"""Generation with a seq2seq export (T5, BART, Marian): a request names the export, the server runs its three.

``fwx export FOLDER --task text2text-generation-with-past --name NAME`` publishes Optimum's three models as
``NAME-encoder``, ``NAME-decoder`` and ``NAME-decoder-with-past``, each a version of its own. A generation
request for ``NAME`` (which is not itself a served model) is answered by the three at one version number:
the request's version, else the newest ready version of ``NAME-decoder-with-past``. They must be parts of
one export: each fwx.json names its part of the task and the same source checksum. A missing or unready
part is the one line the model lookup gives for it. The prompt is tokenized with the version's own
tokenizer (``tokenizer.json`` of ``NAME-decoder-with-past``, checked against its fwx.json); everything
after submission (sampling, stops, usage, cancellation, cache budget, metrics) is the decoder path's own.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol
from weakref import WeakKeyDictionary

from fwx.errors import FwxError, InputError, UnavailableError
from fwx.serving.tasks.assets import TextAssets, assets_of, vocabulary
from fwx.serving.tasks.generate import Generation
from fwx.serving.tasks.seq2seq_engine import Seq2SeqEngine, Seq2SeqParts, layout_of

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from fwx.serving.metrics import Metrics
    from fwx.serving.models import LoadedModel, ModelManager
    from fwx.serving.tasks.metrics import GenerationStats
    from fwx.serving.tasks.protocols import GenerateCall
    from fwx.serving.tasks.scheduler import EngineOptions

TASK = "text2text-generation-with-past"
PARTS = ("encoder", "decoder", "decoder-with-past")


class _Policies(Protocol):
    """What generation takes of the data plane (``plane.Policies``; the task plane imports this module)."""

    @property
    def manager(self) -> ModelManager: ...
    @property
    def metrics(self) -> Metrics: ...
    @property
    def closing(self) -> bool: ...
    def authorize(self, operation: str, auth: str | None) -> None: ...
    def tracked(self) -> AbstractContextManager[None]: ...


class TaskPlane(Protocol):
    """What generation takes of ``plane.TaskPlane``."""

    @property
    def dp(self) -> _Policies: ...
    @property
    def options(self) -> EngineOptions: ...
    def stats_of(self, name: str, version: str) -> GenerationStats: ...


_ENGINES: WeakKeyDictionary[LoadedModel, Seq2SeqEngine] = WeakKeyDictionary()


@dataclass(frozen=True)
class Trio:
    """The three served versions one generation request runs."""

    name: str
    encoder: LoadedModel
    decoder: LoadedModel
    later: LoadedModel  # the decoder with past: its version answers, counts the request, and holds the engine

    @property
    def models(self) -> tuple[LoadedModel, LoadedModel, LoadedModel]:
        return self.encoder, self.decoder, self.later


def asks_for(manager: ModelManager, name: str) -> bool:
    """``name`` is no served model but names the parts of a seq2seq export."""
    known = set(manager.models())
    return name not in known and any(f"{name}-{part}" in known for part in PARTS)


def find(manager: ModelManager, name: str, version: str | None) -> Trio:
    """The three parts at one version; the lookup's own error (404, 503) for a part that is not served."""
    later = _part(manager, name, "decoder-with-past", version)
    v = str(later.version)
    trio = Trio(name, _part(manager, name, "encoder", v), _part(manager, name, "decoder", v), later)
    for part, model in zip(PARTS, trio.models, strict=True):
        if model.manifest.task != f"{TASK}:{part}":
            raise InputError(
                f"model {model.name} version {v} is not the {part} of a {TASK} export "
                f"(its task is {model.manifest.task or 'not recorded'})",
                hint=f"export the folder with --task {TASK} --name {name}",
            )
    if len({m.manifest.source.sha256 for m in trio.models}) != 1:
        raise InputError(
            f"the three parts of {name} at version {v} were exported from different sources",
            hint=f"export the folder again with --task {TASK} --name {name}",
        )
    return trio


def exports(manager: ModelManager) -> list[tuple[str, LoadedModel]]:
    """``(NAME, its decoder with past)`` for every served export a generation request can name now."""
    out = []
    for served in manager.models():
        name = served.removesuffix("-decoder-with-past")
        if name != served and asks_for(manager, name):
            try:
                out.append((name, find(manager, name, None).later))
            except FwxError:  # a part missing or not ready: nothing to generate with
                continue
    return out


def _part(manager: ModelManager, name: str, part: str, version: str | None) -> LoadedModel:
    try:
        return manager.get(f"{name}-{part}", version)
    except FwxError as exc:
        exc.message = f"{name} generates with {name}-encoder, -decoder and -decoder-with-past: {exc.message}"
        raise


async def start(plane: TaskPlane, call: GenerateCall, auth: str | None) -> Generation:
    """The seq2seq side of ``TaskPlane.start``: the same access and shutdown checks, then ``generate``."""
    plane.dp.authorize("infer", auth)
    if plane.dp.closing:
        plane.dp.metrics.count_failure("shutting_down")
        raise UnavailableError("the server is shutting down", hint="retry against another replica")
    if call.messages is not None or call.prompt is None:
        raise InputError(
            f"{call.model} is a seq2seq model: it takes a prompt, not chat messages",
            hint=f"send a prompt to /v1/completions or /v2/models/{call.model}/generate",
        )
    trio = find(plane.dp.manager, call.model, call.version)
    assets = await asyncio.to_thread(assets_of, trio.later, TASK)
    return generate(plane, trio, assets, call)


def generate(plane: TaskPlane, trio: Trio, assets: TextAssets, call: GenerateCall) -> Generation:
    """Tokenize, check the prompt and max_tokens against the positions, reserve the cache, and submit."""
    prompt, params = call.prompt, call.params
    assert prompt is not None
    ids = prompt if isinstance(prompt, list) else assets.tokenizer.encode(prompt, add_special_tokens=True).ids
    if not ids:
        raise InputError("the prompt is empty after tokenization")
    vocab = vocabulary(trio.later, assets)
    if any(not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab for t in ids):
        raise InputError(f"prompt token ids must be integers in [0, {vocab})")
    if len(ids) > assets.context:
        raise InputError(
            f"the prompt has {len(ids)} tokens; the encoder's positions hold {assets.context}",
            hint="shorten the prompt",
        )
    if params.max_tokens > assets.context:
        raise InputError(
            f"max_tokens is {params.max_tokens}; the decoder's positions hold {assets.context}",
            hint=f"ask for at most {assets.context} tokens",
        )
    release = contextlib.ExitStack()
    release.enter_context(plane.dp.tracked())
    for model in trio.models:
        release.enter_context(model.use())
    try:
        engine = _engine(plane, trio, assets)
        seq = engine.submit(list(ids), params, assets.eos_ids)
    except BaseException:
        release.close()
        raise
    return Generation(engine, seq, assets.tokenizer, release, trio.later)


def _engine(plane: TaskPlane, trio: Trio, assets: TextAssets) -> Seq2SeqEngine:
    """One engine per served decoder with past, made again when a part was reloaded under it."""
    found = _ENGINES.get(trio.later)
    if (
        found is None
        or found.parts.encoder is not trio.encoder.runtime
        or found.parts.decoder is not trio.decoder.runtime
    ):
        start = _setting(assets, "decoder_start_token_id")
        if start is None:
            raise InputError(f"{trio.name}: config.json has no decoder_start_token_id", hint="re-export the folder")
        masked = "encoder_attention_mask" in trio.later.signature.input_names
        rts = trio.encoder.runtime, trio.decoder.runtime, trio.later.runtime
        forced = _setting(assets, "forced_bos_token_id"), _setting(assets, "forced_eos_token_id")
        parts = Seq2SeqParts(*rts, start, assets.pad_id, masked, *forced)
        stats = plane.stats_of(trio.name, str(trio.later.version))
        found = Seq2SeqEngine(parts, layout_of(trio.later.signature), plane.options, stats)
        _ENGINES[trio.later] = found
    return found


def _setting(assets: TextAssets, key: str) -> int | None:
    """A token id from generation_config.json, else config.json (transformers' order)."""
    for doc in (assets.generation, assets.config):
        value = doc.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None
