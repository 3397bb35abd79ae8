"""A served version's text assets: its tokenizer, config and generation config, read once per version.

The bytes are read once, checked against the sha256 fwx.json recorded at export
(the bytes checked are the bytes used), bounded in size, and parsed as data:
``tokenizers`` reads the JSON in Rust, the configs are plain JSON. A chat
template is kept as text; only ``chat`` renders it, in a sandbox.
"""

from __future__ import annotations

import hashlib
import json
import os
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fwx.errors import InputError, UsageError

if TYPE_CHECKING:
    from fwx.serving.models import LoadedModel

MAX_ASSET_BYTES = 64 * 2**20
TEXT_TASKS = ("text-classification", "token-classification", "question-answering", "fill-mask", "feature-extraction")
GENERATE = "text-generation-with-past"
#: Tasks whose BYTES inputs are encoded media rather than text (``vision``, ``audio``): no tokenizer.
IMAGE_TASKS = ("image-classification",)
AUDIO_TASKS = ("audio-classification", "automatic-speech-recognition")


@dataclass(frozen=True)
class TextAssets:
    """What the task endpoints need beside the artifact."""

    task: str
    tokenizer: Any  # tokenizers.Tokenizer
    config: dict[str, Any]
    generation: dict[str, Any]
    tokenizer_config: dict[str, Any]
    pad_id: int
    eos_ids: frozenset[int] = field(default_factory=frozenset)
    chat_template: str | None = None  # chat_template.jinja, else tokenizer_config.json's

    @property
    def context(self) -> int:
        """The longest sequence the model's positions cover."""
        for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "n_ctx"):
            value = self.config.get(key)
            if isinstance(value, int) and value > 0:
                return value
        return 2048


_CACHE: weakref.WeakKeyDictionary[Any, TextAssets] = weakref.WeakKeyDictionary()


def media_task(model: LoadedModel) -> str | None:
    """The version's image or audio task, from fwx.json's own field alone: an older manifest's task is inferred
    for text tasks only (``task_of``), so it is never a media one, and nothing is inferred per request."""
    task = model.manifest.task
    return task if task in (*IMAGE_TASKS, *AUDIO_TASKS) else None


def task_of(model: LoadedModel) -> str | None:
    """The version's task: fwx.json's own field when it has one, else (fwx.json written before it had one)
    read from its signature and config, once per served version (the routes ask on every request)."""
    if model not in _TASKS:
        _TASKS[model] = _task_of(model)
    return _TASKS[model]


_TASKS: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()


def _task_of(model: LoadedModel) -> str | None:
    recorded = model.manifest.task
    if recorded:  # as exported; one part of a multi-model task (``TASK:part``) is served as tensors
        return recorded if recorded in (*TEXT_TASKS, GENERATE, *IMAGE_TASKS, *AUDIO_TASKS) else None
    names = set(model.signature.input_names)
    if "input_ids" not in names:
        return None
    if any(n.startswith("past_key_values.") for n in names):
        return GENERATE
    if "config.json" not in model.manifest.assets:
        return None
    from fwx.sources.hf_tasks import infer_task

    try:
        task = infer_task(_json(model, "config.json"))
    except UsageError:
        return None
    outputs = set(model.signature.output_names)
    if task == "feature-extraction" and "last_hidden_state" not in outputs:
        return None
    return task if task in TEXT_TASKS else None


def assets_of(model: LoadedModel, task: str | None = None) -> TextAssets:
    """The version's assets (cached for as long as the version is served); a 400 when it has none. ``task``:
    the task the version serves as a part of a multi-model export (whose fwx.json names ``TASK:part``)."""
    found = _CACHE.get(model)
    if found is None:
        found = _load(model, task)
        _CACHE[model] = found
    return found


def _load(model: LoadedModel, task: str | None = None) -> TextAssets:
    task = task or task_of(model)
    if task is None or "tokenizer.json" not in model.manifest.assets:
        raise InputError(
            f"model {model.name} takes tensors, not text: it has no task with a tokenizer.json in its version",
            hint="send its input tensors, or export a Hugging Face folder that has a fast tokenizer",
        )
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_str(_read(model, "tokenizer.json").decode("utf-8"))
    except Exception as exc:  # noqa: BLE001 - the Rust parser raises its own exception type
        raise InputError(f"{model.name}: tokenizer.json cannot be read: {str(exc)[:200]}") from None
    tok.no_padding()  # rows are padded by fwx (left for generation, right for the text tasks)
    tok.no_truncation()  # text over the context is refused, never cut silently
    config = _json(model, "config.json") if "config.json" in model.manifest.assets else {}
    gen = _json(model, "generation_config.json") if "generation_config.json" in model.manifest.assets else {}
    tcfg = _json(model, "tokenizer_config.json") if "tokenizer_config.json" in model.manifest.assets else {}
    template = None
    if "chat_template.jinja" in model.manifest.assets:
        template = _read(model, "chat_template.jinja").decode("utf-8", errors="replace")
    return TextAssets(task, tok, config, gen, tcfg, _pad_id(tok, config, tcfg), _eos(gen, config), template)


def _read(model: LoadedModel, name: str) -> bytes:
    fd = os.open(Path(model.path) / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(MAX_ASSET_BYTES + 1)
    if len(data) > MAX_ASSET_BYTES:
        raise InputError(f"{model.name}: {name} is over {MAX_ASSET_BYTES >> 20} MiB", hint="re-export the model")
    if hashlib.sha256(data).hexdigest() != model.manifest.assets.get(name):
        raise InputError(
            f"{model.name}: {name} differs from the checksum fwx.json recorded", hint="re-export the model"
        )
    return data


def json_asset(model: LoadedModel, name: str) -> dict[str, Any]:
    """One of the version's JSON assets, checked against fwx.json's sha256 (a 400 when it has none)."""
    if name not in model.manifest.assets:
        raise InputError(f"model {model.name} has no {name} in its version", hint="re-export the Hugging Face folder")
    return _json(model, name)


def _json(model: LoadedModel, name: str) -> dict[str, Any]:
    try:
        doc = json.loads(_read(model, name))
    except ValueError as exc:
        raise InputError(f"{model.name}: {name} is not JSON ({exc})", hint="re-export the model") from None
    return doc if isinstance(doc, dict) else {}


def _token_id(tok: Any, value: Any) -> int | None:
    if isinstance(value, dict):
        value = value.get("content")
    return tok.token_to_id(value) if isinstance(value, str) else None


def _pad_id(tok: Any, config: dict[str, Any], tcfg: dict[str, Any]) -> int:
    for candidate in (_token_id(tok, tcfg.get("pad_token")), config.get("pad_token_id")):
        if isinstance(candidate, int):
            return candidate
    return 0


def _eos(gen: dict[str, Any], config: dict[str, Any]) -> frozenset[int]:
    value = gen.get("eos_token_id", config.get("eos_token_id"))
    items = value if isinstance(value, list) else [value]
    return frozenset(int(v) for v in items if isinstance(v, int))


def vocabulary(model: LoadedModel, assets: TextAssets) -> int:
    """Rows of the embedding table: the logits' last dimension, else the config's ``vocab_size``."""
    logits = next((s for s in model.signature.outputs if s.name == "logits"), None)
    last = logits.shape[-1] if logits is not None and logits.shape else None
    if isinstance(last, int) and last > 0:
        return last
    size = assets.config.get("vocab_size")
    return size if isinstance(size, int) and size > 0 else 2**31
