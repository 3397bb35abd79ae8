"""A causal LM as Optimum's merged decoder: one module for the first step (a length-0 cache) and later ones.

Inputs ``input_ids``, ``attention_mask`` (past + new tokens), ``position_ids``
and ``past_key_values.N.key|value`` ``[batch, kv_heads, past, head_dim]``;
outputs ``logits`` and ``present.N.key|value`` (the cache grown by the new
tokens). The cache is rebuilt from the flat tensors on every call, so every
exporter sees plain tensors in and out. ``greedy_check`` judges an artifact
the way it is used: 16 tokens, step by step with its own cache, against
transformers' own ``generate``.
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


@dataclass(frozen=True)
class CacheShape:
    layers: int
    kv_heads: int
    head_dim: int

    @classmethod
    def of(cls, config: Any) -> CacheShape:
        heads = int(config.num_attention_heads)
        kv = int(getattr(config, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
        return cls(int(config.num_hidden_layers), kv, head_dim)


def _new_cache(config: Any) -> Any:
    from transformers import DynamicCache

    try:
        return DynamicCache(config=config)
    except TypeError:  # transformers 4.x: no config argument
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
        # transformers 5 renamed past_key_values to cache; either spelling is the same object
        self.cache_kw = "cache" if "cache" in forward_params(model) else "past_key_values"

    def forward(self, input_ids: Any, attention_mask: Any, position_ids: Any, *past: Any) -> dict[str, Any]:
        cache = _new_cache(self.model.config)
        for i in range(self.layers):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            **{self.cache_kw: cache},
        )
        result = {"logits": out.logits}
        for i in range(self.layers):
            result[f"present.{i}.key"], result[f"present.{i}.value"] = _layer(cache, i)
        return result


def step_feeds(ids: np.ndarray, past: Sequence[np.ndarray], shape: CacheShape) -> dict[str, np.ndarray]:
    """One generation step's inputs: the new ids, a mask over past + new, their positions, the cache."""
    n_past, n_new = int(past[0].shape[2]), int(ids.shape[1])
    feeds = {
        "input_ids": ids.astype(np.int64),
        "attention_mask": np.ones((ids.shape[0], n_past + n_new), dtype=np.int64),
        "position_ids": np.broadcast_to(np.arange(n_past, n_past + n_new, dtype=np.int64), ids.shape).copy(),
    }
    for i in range(shape.layers):
        feeds[f"past_key_values.{i}.key"], feeds[f"past_key_values.{i}.value"] = past[2 * i], past[2 * i + 1]
    return feeds


def generate(rt: Any, prompt: np.ndarray, shape: CacheShape, steps: int, eos: set[int]) -> list[int]:
    """Greedy tokens from a runtime of the merged decoder, feeding back its own ``present`` as the cache."""
    empty = np.zeros((prompt.shape[0], shape.kv_heads, 0, shape.head_dim), dtype=np.float32)
    past: list[np.ndarray] = [empty] * (2 * shape.layers)
    ids, tokens = prompt, []
    for _ in range(steps):
        out = rt.infer(step_feeds(ids, past, shape))
        token = int(np.asarray(out["logits"])[0, -1].argmax())
        tokens.append(token)
        if token in eos:
            break
        past = [np.asarray(out[f"present.{i}.{k}"]) for i in range(shape.layers) for k in ("key", "value")]
        ids = np.array([[token]], dtype=np.int64)
    return tokens


def reference_tokens(model: Any, prompt: np.ndarray, steps: int) -> list[int]:
    """transformers' own greedy ``generate`` (with its own cache) for ``prompt``."""
    ids = torch.from_numpy(prompt)
    pad = model.generation_config.pad_token_id
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=steps,
            do_sample=False,
            num_beams=1,
            pad_token_id=pad if pad is not None else 0,
        )
    return [int(t) for t in out[0, prompt.shape[1] :]]


def _eos(model: Any) -> set[int]:
    eos = model.generation_config.eos_token_id
    return set(eos if isinstance(eos, list) else [] if eos is None else [eos])


def greedy_check(model: Any, shape: CacheShape, vocab: int, *, steps: int = STEPS) -> UsageCheck:
    """A check that generates ``steps`` tokens from an artifact and compares them with transformers'."""
    prompt = np.random.default_rng(0).integers(0, vocab, (1, PROMPT)).astype(np.int64)
    memo: list[list[int]] = []

    def check(rt: Any) -> tuple[list[str], list[str]]:
        if not memo:
            memo.append(reference_tokens(model, prompt, steps))
        want = memo[0]
        try:
            got = generate(rt, prompt, shape, len(want), _eos(model))
        except Exception as exc:  # noqa: BLE001 - never raise while measuring
            return [f"greedy generation failed: {str(exc).splitlines()[0][:200]}"], []
        if got == want:
            return [], [f"greedy generation of {len(want)} tokens with the cache equals transformers' token for token"]
        at = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
        return [
            f"greedy generation differs from transformers' at token {at + 1}: "
            f"{got[at : at + 1] or 'none'} instead of {want[at : at + 1] or 'none'}"
        ], []

    return check
