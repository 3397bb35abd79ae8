"""A causal LM as Optimum's merged decoder: one module for the first step (a length-0 cache) and later ones.

Inputs ``input_ids``, ``attention_mask`` (past + new tokens), ``position_ids``
(none for ALiBi models: BLOOM, MPT) and ``past_key_values.N.key|value``
``[batch, kv_heads, past, head_dim]``; outputs ``logits`` and
``present.N.key|value``: the cache grown by the new tokens, never cut to a
sliding window (Mistral, Qwen2, Gemma2 apply their window through the mask, as
Optimum's export does, so a left-padded batch stays right). The cache is
rebuilt from the flat tensors on every call, so every exporter sees plain
tensors in and out. ``greedy_check`` judges an artifact the way it is used:
tokens step by step with its own cache, against transformers' own
``generate``, for one prompt alone and for a left-padded batch of two (a short
prompt beside one longer than the window).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fwx.sources.extras import UsageCheck
from fwx.sources.hf_modules import forward_params

STEPS = 16
PROMPT = 5
SHORT = 3  # the short row of the padded batch


@dataclass(frozen=True)
class CacheShape:
    layers: int
    kv_heads: int
    head_dim: int
    positions: bool = True  # position_ids is an input (not for ALiBi)

    @classmethod
    def of(cls, config: Any, params: frozenset[str] | None = None) -> CacheShape:
        from fwx.sources.hf_tasks import uses_positions

        heads = int(config.num_attention_heads)
        kv = int(getattr(config, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
        positions = uses_positions(config.to_dict(), params if params is not None else frozenset({"position_ids"}))
        return cls(int(config.num_hidden_layers), kv, head_dim, positions)


def _new_cache() -> Any:
    """A cache whose every layer keeps all tokens: built with the config, transformers would make sliding
    layers that drop what falls out of the window, and ``present`` would no longer be past + new."""
    from transformers import DynamicCache

    return DynamicCache()


def _layer(cache: Any, i: int) -> tuple[Any, Any]:
    if hasattr(cache, "layers"):
        return cache.layers[i].keys, cache.layers[i].values
    return cache.key_cache[i], cache.value_cache[i]  # transformers 4.x


class CachedDecoder(torch.nn.Module):
    """``input_ids, attention_mask, position_ids, past...`` -> ``{logits, present...}``."""

    fwx_trace_only = True

    def __init__(self, model: Any, shape: CacheShape) -> None:
        super().__init__()
        self.model = model
        self.layers = shape.layers
        self.positions = shape.positions
        # transformers 5 renamed past_key_values to cache; either spelling is the same object
        self.cache_kw = "cache" if "cache" in forward_params(model) else "past_key_values"

    def forward(self, input_ids: Any, attention_mask: Any, *rest: Any) -> dict[str, Any]:
        kw = {"position_ids": rest[0]} if self.positions else {}
        past = rest[1:] if self.positions else rest
        cache = _new_cache()
        for i in range(self.layers):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, use_cache=True, **kw, **{self.cache_kw: cache}
        )
        result = {"logits": out.logits}
        for i in range(self.layers):
            result[f"present.{i}.key"], result[f"present.{i}.value"] = _layer(cache, i)
        return result


def positions_of(mask: np.ndarray) -> np.ndarray:
    """Positions as ``generate`` numbers a left-padded row: from 0 at its first real token (1 on padding)."""
    pos = np.cumsum(mask, axis=1) - 1
    return np.where(mask == 0, 1, pos).astype(np.int64)


def step_feeds(
    ids: np.ndarray, mask: np.ndarray, past: Sequence[np.ndarray], shape: CacheShape
) -> dict[str, np.ndarray]:
    """One generation step's inputs: the new ids, the mask over past + new, their positions, the cache."""
    feeds = {"input_ids": ids.astype(np.int64), "attention_mask": mask.astype(np.int64)}
    if shape.positions:
        feeds["position_ids"] = positions_of(mask)[:, -ids.shape[1] :]
    for i in range(shape.layers):
        feeds[f"past_key_values.{i}.key"], feeds[f"past_key_values.{i}.value"] = past[2 * i], past[2 * i + 1]
    return feeds


def generate(
    rt: Any, prompt: np.ndarray, shape: CacheShape, steps: int, eos: set[int], mask: np.ndarray | None = None
) -> list[list[int]]:
    """Greedy tokens per row from a runtime of the merged decoder, feeding back its own ``present``."""
    mask = np.ones_like(prompt) if mask is None else mask
    empty = np.zeros((prompt.shape[0], shape.kv_heads, 0, shape.head_dim), dtype=np.float32)
    past: list[np.ndarray] = [empty] * (2 * shape.layers)
    ids = prompt
    rows: list[list[int]] = [[] for _ in range(prompt.shape[0])]
    for _ in range(steps):
        out = rt.infer(step_feeds(ids, mask, past, shape))
        tokens = np.asarray(out["logits"])[:, -1].argmax(-1)
        for row, token in zip(rows, tokens, strict=True):
            row.append(int(token))
        if all(any(t in eos for t in row) for row in rows):
            break
        past = [np.asarray(out[f"present.{i}.{k}"]) for i in range(shape.layers) for k in ("key", "value")]
        ids = tokens.reshape(-1, 1).astype(np.int64)
        mask = np.concatenate([mask, np.ones((mask.shape[0], 1), dtype=mask.dtype)], axis=1)
    return [_until_eos(row, eos) for row in rows]


def _until_eos(row: list[int], eos: set[int]) -> list[int]:
    end = next((i for i, t in enumerate(row) if t in eos), len(row) - 1)
    return row[: end + 1]


def reference_tokens(model: Any, prompt: np.ndarray, steps: int, mask: np.ndarray | None = None) -> list[list[int]]:
    """transformers' own greedy ``generate`` (with its own cache) for ``prompt``, per row, up to its EOS."""
    ids = torch.from_numpy(prompt)
    pad = model.generation_config.pad_token_id
    attention = torch.ones_like(ids) if mask is None else torch.from_numpy(mask)
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=attention,
            max_new_tokens=steps,
            min_new_tokens=0,
            do_sample=False,
            num_beams=1,
            pad_token_id=pad if pad is not None else 0,
        )
    return [_until_eos([int(t) for t in row], _eos(model)) for row in out[:, prompt.shape[1] :]]


def _eos(model: Any) -> set[int]:
    eos = model.generation_config.eos_token_id
    return set(eos if isinstance(eos, list) else [] if eos is None else [eos])


@dataclass(frozen=True)
class Prompt:
    what: str
    ids: np.ndarray
    mask: np.ndarray


def prompts(config: Any, vocab: int) -> tuple[Prompt, ...]:
    """One prompt alone, and a left-padded batch of two: a short row beside one longer than the sliding
    window (if any), which only a mask that applies the window over a full cache gets right."""
    rng = np.random.default_rng(0)
    window = int(getattr(config, "sliding_window", None) or 0)
    limit = int(getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None) or 512)
    long = max(2, min(max(PROMPT + 3, window + 4), limit - STEPS))
    pad = getattr(config, "pad_token_id", None)
    batch = rng.integers(0, vocab, (2, long)).astype(np.int64)
    mask = np.ones_like(batch)
    mask[0, : long - SHORT] = 0
    batch[0, : long - SHORT] = int(pad) if pad is not None and 0 <= int(pad) < vocab else 0
    one = rng.integers(0, vocab, (1, PROMPT)).astype(np.int64)
    return (
        Prompt(f"a prompt of {PROMPT} tokens", one, np.ones_like(one)),
        Prompt(f"a left-padded batch of 2 ({SHORT} and {long} tokens)", batch, mask),
    )


def greedy_check(model: Any, shape: CacheShape, vocab: int, *, steps: int = STEPS) -> UsageCheck:
    """A check that generates ``steps`` tokens from an artifact, for each prompt, and compares them with
    transformers'."""
    cases = prompts(model.config, vocab)
    memo: list[list[list[int]]] = []

    def check(rt: Any) -> tuple[list[str], list[str]]:
        if not memo:
            memo.extend(reference_tokens(model, c.ids, steps, c.mask) for c in cases)
        errors: list[str] = []
        for case, want in zip(cases, memo, strict=True):
            try:
                got = generate(rt, case.ids, shape, steps, _eos(model), case.mask)
            except Exception as exc:  # noqa: BLE001 - never raise while measuring
                errors.append(f"greedy generation ({case.what}) failed: {str(exc).splitlines()[0][:200]}")
                continue
            errors += _differs(case.what, got, want)
        if errors:
            return errors, []
        return [], [
            f"greedy generation of {steps} tokens with the cache equals transformers' token for token "
            f"({'; '.join(c.what for c in cases)})"
        ]

    return check


def _differs(what: str, got: list[list[int]], want: list[list[int]]) -> list[str]:
    for r, (g, w) in enumerate(zip(got, want, strict=True)):
        if g != w:
            at = next((i for i, (a, b) in enumerate(zip(g, w, strict=False)) if a != b), min(len(g), len(w)))
            row = f", row {r + 1}" if len(got) > 1 else ""
            return [
                f"greedy generation ({what}{row}) differs from transformers' at token {at + 1}: "
                f"{g[at : at + 1] or 'none'} instead of {w[at : at + 1] or 'none'}"
            ]
    return []
