"""fwx's merged seq2seq decoder (``TASK:decoder-merged``; BART, T5, Marian, mBART, Whisper): one module for
every generation step. Optimum's two-decoder layout is ``hf_seq2seq_split``, which reuses the helpers here.

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
lengths (the shorter one padded at the end, then the same rows padded at the start).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    frames: int | None = None  # Whisper: the encoder's fixed number of output frames (no encoder mask)

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
        frames = int(config.max_source_positions) if getattr(config, "num_mel_bins", None) else None
        return cls(layers, heads, head_dim, hidden, frames)


class CachedSeq2SeqDecoder(torch.nn.Module):
    """``input_ids, encoder_attention_mask, encoder_hidden_states, past...`` -> ``{logits, present...}``."""

    fwx_trace_only = True

    def __init__(self, model: Any, shape: DecoderShape) -> None:
        super().__init__()
        self.model = model
        self.layers = shape.layers
        self.masked = shape.frames is None
        self.cache_kw = "cache" if "cache" in forward_params(model) else "past_key_values"

    def forward(self, input_ids: Any, *rest: Any) -> dict[str, Any]:
        from transformers import DynamicCache, EncoderDecoderCache

        mask = {"attention_mask": rest[0]} if self.masked else {}
        encoder_hidden_states, *past = rest[1:] if self.masked else rest

        own = DynamicCache()
        for i in range(self.layers):
            own.update(past[2 * i], past[2 * i + 1], i)
        # an empty cross-attention cache: each layer projects encoder_hidden_states afresh
        cache = EncoderDecoderCache(own, DynamicCache())
        out = self.model(
            decoder_input_ids=input_ids,
            encoder_outputs=(encoder_hidden_states,),
            **mask,
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


def _encode(model: Any, inputs: dict[str, np.ndarray]) -> np.ndarray:
    with torch.no_grad():
        out = model.get_encoder()(**{k: torch.from_numpy(v) for k, v in inputs.items()})
    return np.asarray(out.last_hidden_state.numpy())


def generate(rt: Any, model: Any, inputs: dict[str, np.ndarray], shape: DecoderShape, steps: int) -> list[list[int]]:
    """Greedy tokens per row: the encoder in transformers (not under test), the decoder artifact with its cache."""
    states = _encode(model, inputs)
    batch = states.shape[0]
    empty = np.zeros((batch, shape.heads, 0, shape.head_dim), dtype=np.float32)
    past = [empty] * (2 * shape.layers)
    tokens = np.full((batch, 1), _start(model), dtype=np.int64)
    rows: list[list[int]] = [[] for _ in range(batch)]
    eos = _eos(model)
    for _ in range(steps):
        feeds = {"input_ids": tokens, "encoder_hidden_states": states}
        if shape.frames is None:
            feeds["encoder_attention_mask"] = inputs["attention_mask"]
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


def reference_tokens(model: Any, inputs: dict[str, np.ndarray], steps: int) -> list[list[int]]:
    """transformers' greedy tokens: ``generate`` for a text model; for Whisper, whose ``generate`` adds
    language and task tokens and suppresses others by its generation config, the model's own forward step by
    step with its own cache, from the start token (what the artifact is asked to reproduce)."""
    if "input_features" in inputs:
        return _stepwise(model, inputs, steps)
    with torch.no_grad():
        out = model.generate(
            **{k: torch.from_numpy(v) for k, v in inputs.items()},
            max_new_tokens=steps,
            min_new_tokens=0,
            do_sample=False,
            num_beams=1,
        )
    return [_until_eos([int(t) for t in row], _eos(model)) for row in out[:, 1:]]


def _stepwise(model: Any, inputs: dict[str, np.ndarray], steps: int) -> list[list[int]]:
    states = torch.from_numpy(_encode(model, inputs))
    ids = torch.full((states.shape[0], 1), _start(model), dtype=torch.long)
    cache_kw = "cache" if "cache" in forward_params(model) else "past_key_values"
    cache: Any = None
    rows: list[list[int]] = [[] for _ in range(states.shape[0])]
    eos = _eos(model)
    with torch.no_grad():
        for _ in range(steps):
            out = model(encoder_outputs=(states,), decoder_input_ids=ids, use_cache=True, **{cache_kw: cache})
            cache = out.past_key_values
            new = out.logits[:, -1].argmax(-1)
            for row, token in zip(rows, new.tolist(), strict=True):
                row.append(int(token))
            if all(any(t in eos for t in row) for row in rows):
                break
            ids = new[:, None]
    return [_until_eos(row, eos) for row in rows]


def _cases(model: Any, shape: DecoderShape, vocab: int) -> tuple[tuple[str, dict[str, np.ndarray]], ...]:
    rng = np.random.default_rng(0)
    if shape.frames is not None:  # Whisper: log-mel features of a fixed length
        bins = int(model.config.num_mel_bins)
        one = rng.standard_normal((1, bins, 2 * shape.frames)).astype(np.float32)
        two = rng.standard_normal((2, bins, 2 * shape.frames)).astype(np.float32)
        return (("one clip", {"input_features": one}), ("a batch of 2 clips", {"input_features": two}))
    pad = int(model.config.pad_token_id or 0)
    one = rng.integers(0, vocab, (1, 5)).astype(np.int64)
    batch = rng.integers(0, vocab, (2, 7)).astype(np.int64)
    mask = np.ones_like(batch)
    mask[0, 3:] = 0  # the encoder's padding goes at the end, as tokenizers pad a seq2seq input
    batch[0, 3:] = pad
    left, left_mask = np.roll(batch, 4, axis=1), np.roll(mask, 4, axis=1)  # the same rows, padded on the left
    return (
        ("a sentence of 5 tokens", {"input_ids": one, "attention_mask": np.ones_like(one)}),
        ("a padded batch of 2 (3 and 7 tokens)", {"input_ids": batch, "attention_mask": mask}),
        ("a left-padded batch of 2 (3 and 7 tokens)", {"input_ids": left, "attention_mask": left_mask}),
    )


def greedy_errors(
    model: Any,
    cases: Sequence[tuple[str, dict[str, np.ndarray]]],
    memo: list[list[list[int]]],
    steps: int,
    run: Callable[[dict[str, np.ndarray]], Any],
) -> list[str]:
    """What differs between ``run(inputs)`` and transformers' greedy tokens, case by case (the reference is
    computed once, into ``memo``); never raises while measuring."""
    if not memo:
        try:
            memo.extend(reference_tokens(model, inputs, steps) for _, inputs in cases)
        except Exception as exc:  # noqa: BLE001 - never raise while measuring
            return [f"transformers' generate() cannot run this model: {str(exc).splitlines()[0][:200]}"]
    errors: list[str] = []
    for (what, inputs), want in zip(cases, memo, strict=True):
        try:
            got = run(inputs)
        except Exception as exc:  # noqa: BLE001 - never raise while measuring
            errors.append(f"greedy generation ({what}) failed: {str(exc).splitlines()[0][:200]}")
            continue
        errors += _differs(what, got, want)
    return errors


def greedy_check(model: Any, shape: DecoderShape, vocab: int, *, steps: int = STEPS) -> UsageCheck:
    """Greedy decoding with the artifact against transformers', for one input alone and a batch of two."""
    cases = _cases(model, shape, vocab)
    memo: list[list[list[int]]] = []

    def check(rt: Any) -> tuple[list[str], list[str]]:
        errors = greedy_errors(model, cases, memo, steps, lambda inputs: generate(rt, model, inputs, shape, steps))
        if errors:
            return errors, []
        whats = "; ".join(what for what, _ in cases)
        return [], [
            f"greedy generation of {steps} tokens with the cache equals transformers' token for token ({whats})"
        ]

    return check
