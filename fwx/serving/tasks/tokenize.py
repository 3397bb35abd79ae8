"""Text to the model's padded tensors with the version's own tokenizer.

Rows are padded on the right to a power-of-two length (at least 8, at most the
model's context), so requests of similar lengths share a shape and therefore a
batch in the existing batcher, without a recompile per length.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fwx.errors import InputError
from fwx.serving.tasks.assets import TextAssets

MAX_TEXT_BYTES = 1 << 20


def texts_of(data: np.ndarray, name: str) -> list[str]:
    """A BYTES tensor's elements as strings: strict UTF-8, one clear 400 otherwise."""
    out = []
    for i, item in enumerate(data.reshape(-1)):
        raw = item.encode() if isinstance(item, str) else bytes(item)
        if len(raw) > MAX_TEXT_BYTES:
            raise InputError(f"input {name!r} element {i} is over 1 MiB of text")
        try:
            out.append(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise InputError(
                f"input {name!r} element {i} is not valid UTF-8 (byte {exc.start})", hint="send text as UTF-8"
            ) from None
    if not out:
        raise InputError(f"input {name!r} holds no text")
    return out


def encode(assets: TextAssets, texts: Sequence[str], pairs: Sequence[str] | None = None) -> list[Any]:
    """The tokenizer's encodings (with offsets and special-token masks), refusing text over the context."""
    tok = assets.tokenizer
    batch: list[Any] = list(zip(texts, pairs, strict=True)) if pairs is not None else list(texts)
    encodings = tok.encode_batch(batch)
    for i, enc in enumerate(encodings):
        if len(enc.ids) > assets.context:
            raise InputError(
                f"text {i} is {len(enc.ids)} tokens; the model reads at most {assets.context}",
                hint="send shorter text",
            )
    return list(encodings)


def bucket(n: int, limit: int) -> int:
    size = 8
    while size < n:
        size *= 2
    return max(n, min(size, limit))


def tensors(assets: TextAssets, encodings: Sequence[Any], names: Sequence[str]) -> dict[str, np.ndarray]:
    """``input_ids``, ``attention_mask`` and ``token_type_ids`` (those the model takes), right-padded."""
    width = bucket(max(len(e.ids) for e in encodings), assets.context)
    ids = np.full((len(encodings), width), assets.pad_id, dtype=np.int64)
    mask = np.zeros((len(encodings), width), dtype=np.int64)
    types = np.zeros((len(encodings), width), dtype=np.int64)
    for r, enc in enumerate(encodings):
        n = len(enc.ids)
        ids[r, :n], mask[r, :n], types[r, :n] = enc.ids, enc.attention_mask, enc.type_ids
    known = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    missing = [n for n in names if n not in known]
    if missing:
        raise InputError(f"the model's inputs {missing} are not made from text", hint="send its tensors instead")
    return {n: known[n] for n in names}
