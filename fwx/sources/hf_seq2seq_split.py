"""Optimum's seq2seq layout with a cache: ``decoder_model`` for the first step, ``decoder_with_past_model``
for every later one.

The first decoder takes the start tokens, the encoder's mask and hidden states and returns the logits and
the whole cache: ``present.N.decoder.key|value`` (self-attention, grown by the new tokens) and
``present.N.encoder.key|value`` (cross-attention: the encoder states projected once per layer). The decoder
with past takes the new tokens, the encoder's mask and both caches (``past_key_values.N.decoder.*`` and
``past_key_values.N.encoder.*``) and returns the logits and the self-attention cache grown by the new tokens;
it never sees the encoder states, so no step after the first projects them again. Whisper's take no encoder
mask (every frame is real). Each artifact is checked in its role: the other role is played by the same
wrapper run in PyTorch, and greedy tokens must equal transformers' (``hf_seq2seq.reference_tokens``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fwx.signature import TensorSpec
from fwx.sources.extras import UsageCheck
from fwx.sources.hf_cache import STEPS, _eos, _layer, _until_eos
from fwx.sources.hf_modules import forward_params
from fwx.sources.hf_seq2seq import DecoderShape, _cases, _encode, _start, greedy_errors


def _cache(layers: int, own: list[Any], cross: list[Any]) -> Any:
    """An ``EncoderDecoderCache`` holding ``own`` (may be empty) and ``cross`` as already computed: a cross
    layer marked updated is read, never projected again."""
    from transformers import DynamicCache, EncoderDecoderCache

    mine, theirs = DynamicCache(), DynamicCache()
    for i in range(layers if own else 0):
        mine.update(own[2 * i], own[2 * i + 1], i)
    cache = EncoderDecoderCache(mine, theirs)  # built empty: no size test on the traced cross length
    for i in range(layers if cross else 0):
        theirs.update(cross[2 * i], cross[2 * i + 1], i)
        cache.is_updated[i] = True
    return cache


class _Seq2SeqPart(torch.nn.Module):
    fwx_trace_only = True

    def __init__(self, model: Any, shape: DecoderShape) -> None:
        super().__init__()
        self.model = model
        self.shape = shape
        self.masked = shape.frames is None
        self.cache_kw = "cache" if "cache" in forward_params(model) else "past_key_values"

    def _run(self, input_ids: Any, mask: Any, states: Any, cache: Any) -> Any:
        return self.model(
            decoder_input_ids=input_ids,
            encoder_outputs=(states,),
            **({"attention_mask": mask} if self.masked else {}),
            use_cache=True,
            **{self.cache_kw: cache},
        )


class FirstDecoder(_Seq2SeqPart):
    """Optimum's ``decoder_model`` with a cache out: ``input_ids, [encoder_attention_mask],
    encoder_hidden_states`` -> ``logits, present.N.decoder.*, present.N.encoder.*``."""

    def forward(self, input_ids: Any, *rest: Any) -> dict[str, Any]:
        mask, states = (rest[0], rest[1]) if self.masked else (None, rest[0])
        cache = _cache(self.shape.layers, [], [])
        out = self._run(input_ids, mask, states, cache)
        result = {"logits": out.logits}
        for i in range(self.shape.layers):
            dk, dv = _layer(cache.self_attention_cache, i)
            ek, ev = _layer(cache.cross_attention_cache, i)
            result.update(
                {
                    f"present.{i}.decoder.key": dk,
                    f"present.{i}.decoder.value": dv,
                    f"present.{i}.encoder.key": ek,
                    f"present.{i}.encoder.value": ev,
                }
            )
        return result


class PastDecoder(_Seq2SeqPart):
    """Optimum's ``decoder_with_past_model``: ``input_ids, [encoder_attention_mask], past_key_values.N.{decoder,
    encoder}.{key,value}`` -> ``logits, present.N.decoder.*``."""

    def forward(self, input_ids: Any, *rest: Any) -> dict[str, Any]:
        mask = rest[0] if self.masked else None
        past = rest[1:] if self.masked else rest
        own = [t for i in range(self.shape.layers) for t in past[4 * i : 4 * i + 2]]
        cross = [t for i in range(self.shape.layers) for t in past[4 * i + 2 : 4 * i + 4]]
        cache = _cache(self.shape.layers, own, cross)
        # the encoder states are read only for their shape (the mask's key length): the cross keys are cached
        key = cross[0]
        states = torch.zeros(key.shape[0], key.shape[2], self.shape.hidden, dtype=key.dtype)
        out = self._run(input_ids, mask, states, cache)
        result = {"logits": out.logits}
        for i in range(self.shape.layers):
            result[f"present.{i}.decoder.key"], result[f"present.{i}.decoder.value"] = _layer(
                cache.self_attention_cache, i
            )
        return result


class _InTorch:
    """A part run in PyTorch behind a runtime's ``infer``: the other role while one artifact is checked."""

    def __init__(self, module: torch.nn.Module, specs: tuple[TensorSpec, ...]) -> None:
        self.module = module
        self.names = [s.name for s in specs]

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with torch.no_grad():
            out = self.module(*(torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in self.names))
        return {k: v.numpy() for k, v in out.items()}


def _kv(out: dict[str, Any], layers: int, side: str) -> dict[str, np.ndarray]:
    return {
        f"past_key_values.{i}.{side}.{k}": np.asarray(out[f"present.{i}.{side}.{k}"])
        for i in range(layers)
        for k in ("key", "value")
    }


def generate(
    first: Any, later: Any, model: Any, inputs: dict[str, np.ndarray], shape: DecoderShape, steps: int
) -> list[list[int]]:
    """Greedy tokens per row: the encoder in transformers, ``first`` for the first step, ``later`` after."""
    states = _encode(model, inputs)
    mask = {"encoder_attention_mask": inputs["attention_mask"]} if shape.frames is None else {}
    tokens = np.full((states.shape[0], 1), _start(model), dtype=np.int64)
    out = first.infer({"input_ids": tokens, **mask, "encoder_hidden_states": states})
    cross = _kv(out, shape.layers, "encoder")
    rows: list[list[int]] = [[] for _ in range(states.shape[0])]
    eos = _eos(model)
    for step in range(steps):
        new = np.asarray(out["logits"])[:, -1].argmax(-1)
        for row, token in zip(rows, new, strict=True):
            row.append(int(token))
        if step == steps - 1 or all(any(t in eos for t in row) for row in rows):
            break
        own = _kv(out, shape.layers, "decoder")
        past = {k: v for i in range(shape.layers) for k, v in _layer_feeds(own, cross, i)}
        out = later.infer({"input_ids": new.reshape(-1, 1).astype(np.int64), **mask, **past})
    return [_until_eos(row, eos) for row in rows]


def _layer_feeds(own: dict[str, np.ndarray], cross: dict[str, np.ndarray], i: int) -> list[tuple[str, np.ndarray]]:
    names = [f"past_key_values.{i}.{side}.{k}" for side in ("decoder", "encoder") for k in ("key", "value")]
    return [(n, own[n] if ".decoder." in n else cross[n]) for n in names]


def greedy_check(
    model: Any,
    shape: DecoderShape,
    vocab: int,
    role: str,
    specs: dict[str, tuple[TensorSpec, ...]],
    *,
    steps: int = STEPS,
) -> UsageCheck:
    """Greedy decoding with the artifact in ``role`` (``decoder`` or ``decoder-with-past``) and the other part
    in PyTorch, against transformers', for one input alone and padded batches of two."""
    cases = _cases(model, shape, vocab)
    memo: list[list[list[int]]] = []
    torch_first = _InTorch(FirstDecoder(model, shape).eval(), specs["decoder"])
    torch_later = _InTorch(PastDecoder(model, shape).eval(), specs["decoder-with-past"])

    def check(rt: Any) -> tuple[list[str], list[str]]:
        first, later = (rt, torch_later) if role == "decoder" else (torch_first, rt)
        errors = greedy_errors(
            model, cases, memo, steps, lambda inputs: generate(first, later, model, inputs, shape, steps)
        )
        if errors:
            return errors, []
        other = "decoder_with_past" if role == "decoder" else "decoder"
        whats = "; ".join(what for what, _ in cases)
        return [], [
            f"greedy generation of {steps} tokens with the cache equals transformers' token for token "
            f"(this {role.replace('-', '_')} with the {other} in PyTorch; {whats})"
        ]

    return check
