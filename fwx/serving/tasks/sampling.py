"""Choosing the next token from one row of logits: greedy, or sampled with temperature, top-k and top-p.

The order is transformers' (temperature, then top-k, then top-p), so a seeded
request draws from the same distribution ``generate(do_sample=True)`` would;
each request owns its generator, so a seed gives the same text whatever else
shares the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fwx.errors import InputError


@dataclass(frozen=True)
class SamplingParams:
    """One request's decoding settings, checked once when the request is read."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    greedy: bool = True
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise InputError(f"max_tokens must be at least 1, not {self.max_tokens}")
        if not 0.0 <= self.temperature <= 100.0:
            raise InputError(f"temperature must be between 0 and 100, not {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise InputError(f"top_p must be in (0, 1], not {self.top_p}")
        if self.top_k < 0:
            raise InputError(f"top_k must be 0 (off) or positive, not {self.top_k}")
        if self.seed is not None and self.seed < 0:
            raise InputError(f"seed must be a non-negative whole number, not {self.seed}")
        if len(self.stop) > 16 or any(not s or len(s) > 256 for s in self.stop):
            raise InputError("stop takes at most 16 non-empty strings of at most 256 characters")

    def generator(self) -> np.random.Generator | None:
        return None if self.greedy else np.random.default_rng(self.seed)


def pick(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator | None) -> int:
    """The next token for one row of float logits."""
    if rng is None:
        return int(np.argmax(logits))
    scores = logits.astype(np.float64) / max(params.temperature, 1e-5)
    if 0 < params.top_k < scores.size:
        kth = np.partition(scores, -params.top_k)[-params.top_k]
        scores = np.where(scores < kth, -np.inf, scores)
    probs = np.exp(scores - scores.max())
    probs /= probs.sum()
    if params.top_p < 1.0:
        order = np.argsort(-probs, kind="stable")
        cum = np.cumsum(probs[order])
        keep = order[: int(np.searchsorted(cum, params.top_p)) + 1]
        mask = np.zeros_like(probs)
        mask[keep] = probs[keep]
        probs = mask / mask.sum()
    return int(rng.choice(probs.size, p=probs))
