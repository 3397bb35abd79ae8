"""A seq2seq model's decoder with a cache (BART, T5, Marian, mBART): one module for every generation step.

Inputs ``input_ids`` (the new decoder tokens), ``encoder_attention_mask``,
``encoder_hidden_states`` (the encoder artifact's output) and the decoder's
self-attention cache ``past_key_values.N.decoder.key|value`` ``[batch, heads,
past, head_dim]``, of length 0 at the first step; outputs ``logits`` and
``present.N.decoder.key|value`` (past + new). Optimum's names; unlike Optimum's
``decoder_with_past_model`` the cross-attention keys are computed from
``encoder_hidden_states`` at every step rather than carried as
``past_key_values.N.encoder.*``: one artifact serves the first step and every
later one (what Optimum's merged decoder does with a ``use_cache_branch``
switch no exporter here can keep), at the cost of one projection of the
encoder states per step. ``greedy_check`` runs it the way it is used, against
transformers' ``generate``: a sentence alone and a batch of two of different
lengths (the shorter one padded).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fwx.sources.extras import UsageCheck
from fwx.sources.hf_cache import STEPS, _differs, _eos, _layer, _until_eos
from fwx.sources.hf_modules import forward_params


@dataclass(frozen=True)
class DecoderShape:
    layers: int
    heads: int
    head_dim: int
    hidden: int

    @classmethod
    def of(cls, config: Any) -> DecoderShape:
        hidden = int(getattr(config, "d_model", None) or config.hidden_size)
        layers = int(
            getattr(config, "num_decoder_layers", None)
            or getattr(config, "decoder_layers", None)
            or config.num_hidden_layers
        )
        heads = int(getattr(config, "decoder_attention_heads", None) or config.num_attention_heads)
        head_dim = int(getattr(config, "d_kv", None) or hidden // heads)  # T5's d_kv need not be hidden / heads
        return cls(layers, heads, head_dim, hidden)


class CachedSeq2SeqDecoder(torch.nn.Module):
    """``input_ids, encoder_attention_mask, encoder_hidden_states, past...`` -> ``{logits, present...}``."""

    fwx_trace_only = True

    def __init__(self, model: Any, shape: DecoderShape) -> None:
        super().__init__()
        self.model = model
        self.layers = shape.layers
        self.cache_kw = "cache" if "cache" in forward_params(model) else "past_key_values"

    def forward(
        self, input_ids: Any, encoder_attention_mask: Any, encoder_hidden_states: Any, *past: Any
    ) -> dict[str, Any]:
        from transformers import DynamicCache, EncoderDecoderCache

        own = DynamicCache()
        for i in range(self.layers):
            own.update(past[2 * i], past[2 * i + 1], i)
        # an empty cross-attention cache: each layer projects encoder_hidden_states afresh
        cache = EncoderDecoderCache(own, DynamicCache())
        out = self.model(
            decoder_input_ids=input_ids,
            attention_mask=encoder_attention_mask,
            encoder_outputs=(encoder_hidden_states,),
            use_cache=True,
            **{self.cache_kw: cache},
        )
        result = {"logits": out.logits}
        for i in range(self.layers):
            result[f"present.{i}.decoder.key"], result[f"present.{i}.decoder.value"] = _layer(own, i)
        return result


def _start(model: Any) -> int:
    start = model.generation_config.decoder_start_token_id
    if start is None:
        start = model.config.decoder_start_token_id
    return int(start if start is not None else model.config.pad_token_id or 0)


def generate(
    rt: Any, model: Any, ids: np.ndarray, mask: np.ndarray, shape: DecoderShape, steps: int
) -> list[list[int]]:
    """Greedy tokens per row: the encoder in transformers (not under test), the decoder artifact with its cache."""
    with torch.no_grad():
        hidden = model.get_encoder()(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
    states = hidden.last_hidden_state.numpy()
    empty = np.zeros((ids.shape[0], shape.heads, 0, shape.head_dim), dtype=np.float32)
    past = [empty] * (2 * shape.layers)
    tokens = np.full((ids.shape[0], 1), _start(model), dtype=np.int64)
    rows: list[list[int]] = [[] for _ in range(ids.shape[0])]
    eos = _eos(model)
    for _ in range(steps):
        feeds = {"input_ids": tokens, "encoder_attention_mask": mask, "encoder_hidden_states": states}
        for i in range(shape.layers):
            feeds[f"past_key_values.{i}.decoder.key"] = past[2 * i]
            feeds[f"past_key_values.{i}.decoder.value"] = past[2 * i + 1]
        out = rt.infer(feeds)
        new = np.asarray(out["logits"])[:, -1].argmax(-1)
        for row, token in zip(rows, new, strict=True):
            row.append(int(token))
        if all(any(t in eos for t in row) for row in rows):
            break
        past = [np.asarray(out[f"present.{i}.decoder.{k}"]) for i in range(shape.layers) for k in ("key", "value")]
        tokens = new.reshape(-1, 1).astype(np.int64)
    return [_until_eos(row, eos) for row in rows]


def reference_tokens(model: Any, ids: np.ndarray, mask: np.ndarray, steps: int) -> list[list[int]]:
    with torch.no_grad():
        out = model.generate(
            input_ids=torch.from_numpy(ids),
            attention_mask=torch.from_numpy(mask),
            max_new_tokens=steps,
            min_new_tokens=0,
            do_sample=False,
            num_beams=1,
        )
    return [_until_eos([int(t) for t in row], _eos(model)) for row in out[:, 1:]]


def greedy_check(model: Any, shape: DecoderShape, vocab: int, *, steps: int = STEPS) -> UsageCheck:
    """Greedy decoding with the artifact against ``generate``, for one sentence and a padded batch of two."""
    rng = np.random.default_rng(0)
    pad = int(model.config.pad_token_id or 0)
    one = rng.integers(0, vocab, (1, 5)).astype(np.int64)
    batch = rng.integers(0, vocab, (2, 7)).astype(np.int64)
    mask = np.ones_like(batch)
    mask[0, 3:] = 0  # the encoder's padding goes at the end, as tokenizers pad a seq2seq input
    batch[0, 3:] = pad
    cases = (("a sentence of 5 tokens", one, np.ones_like(one)), ("a padded batch of 2 (3 and 7 tokens)", batch, mask))
    memo: list[list[list[int]]] = []

    def check(rt: Any) -> tuple[list[str], list[str]]:
        if not memo:
            try:
                memo.extend(reference_tokens(model, ids, m, steps) for _, ids, m in cases)
            except Exception as exc:  # noqa: BLE001 - never raise while measuring
                return [f"transformers' generate() cannot run this model: {str(exc).splitlines()[0][:200]}"], []
        errors: list[str] = []
        for (what, ids, m), want in zip(cases, memo, strict=True):
            try:
                got = generate(rt, model, ids, m, shape, steps)
            except Exception as exc:  # noqa: BLE001 - never raise while measuring
                errors.append(f"greedy generation ({what}) failed: {str(exc).splitlines()[0][:200]}")
                continue
            errors += _differs(what, got, want)
        if errors:
            return errors, []
        whats = "; ".join(what for what, _, _ in cases)
        return [], [
            f"greedy generation of {steps} tokens with the cache equals transformers' token for token ({whats})"
        ]

    return check
