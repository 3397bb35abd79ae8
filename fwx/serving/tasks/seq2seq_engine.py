"""Generation over Optimum's three seq2seq models: the encoder once per request, the first decoder, then the
decoder with past, step by step; requests that arrive together share every step.

The decoder with past takes no decoder attention mask and counts the new token's position from its cache's
length (BART's position table, T5's relative buckets), so rows at different decoder lengths cannot share a
step: a left-padded cache would shift their positions and the padding would be attended to. Rows therefore
run in cohorts: the prompts waiting at a step's start are encoded together (right-padded, as a tokenizer
pads a seq2seq input, with ``encoder_attention_mask`` zeroing the padding) and decode in lockstep; a
finished or cancelled row leaves its cohort between steps, and a prompt that arrives later starts a cohort
of its own at the next step instead of waiting for the running ones to finish. Every step runs each cohort
once. Submission, the cache budget, cancellation, delivery and the metrics are the decoder engine's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fwx.errors import InputError
from fwx.serving.tasks.scheduler import CacheLayout, Engine, EngineOptions, Pick, Sequence

if TYPE_CHECKING:
    from fwx.runtimes.base import Runtime
    from fwx.serving.tasks.metrics import GenerationStats
    from fwx.signature import Signature


@dataclass(frozen=True)
class Seq2SeqParts:
    """The three runtimes of one exported version and what the first step needs."""

    encoder: Runtime
    decoder: Runtime
    later: Runtime  # the decoder with past
    start_token: int
    pad_id: int
    masked: bool = True  # the decoders take ``encoder_attention_mask``
    # the generation config's forced tokens (BART, mBART, Marian): the first token, and the last one a
    # request's max_tokens allows, as transformers' ForcedBOS/ForcedEOS logits processors force them
    forced_bos: int | None = None
    forced_eos: int | None = None


@dataclass(eq=False)
class _Cohort:
    """Rows that started together and so share a decoder length."""

    rows: list[Sequence]
    enc_mask: np.ndarray  # [rows, encoder length], right-padded
    cross: list[np.ndarray]  # per layer key, value: [rows, heads, encoder length, head_dim], fixed
    own: list[np.ndarray]  # per layer key, value: [rows, heads, decoder length, head_dim], grows each step
    next: np.ndarray  # [rows]: the token each row feeds next

    def keep(self, idx: list[int]) -> None:
        """Only rows ``idx``; encoder columns no row left uses (right padding) are cut."""
        self.rows = [self.rows[i] for i in idx]
        self.enc_mask, self.next = self.enc_mask[idx], self.next[idx]
        used = np.asarray(self.enc_mask.any(axis=0))
        width = int(used.shape[0])
        end = width - int(np.argmax(used[::-1])) if used.any() else width
        self.enc_mask = self.enc_mask[:, :end]
        self.cross = [c[idx][:, :, :end] for c in self.cross]
        self.own = [c[idx] for c in self.own]


def layout_of(later: Signature) -> CacheLayout:
    """Layers, heads and head size from the decoder with past's self-attention cache inputs: what one token's
    keys and values cost, in the encoder's cache and the decoder's alike."""
    own = [s for s in later.inputs if s.name.startswith("past_key_values.") and ".decoder." in s.name]
    heads, dim = (own[0].shape[1], own[0].shape[3]) if own and len(own[0].shape) == 4 else (None, None)
    if not isinstance(heads, int) or not isinstance(dim, int) or heads < 1 or dim < 1:
        raise InputError(
            "the decoder with past needs past_key_values.N.decoder.key|value inputs with fixed head counts and sizes",
            hint="re-export the folder with --task text2text-generation-with-past",
        )
    return CacheLayout(len(own) // 2, heads, dim, positions=False)


class Seq2SeqEngine(Engine):
    """The decoder engine's loop over cohorts (``submit``, ``cancel`` and delivery are inherited)."""

    def __init__(
        self, parts: Seq2SeqParts, layout: CacheLayout, options: EngineOptions, stats: GenerationStats
    ) -> None:
        super().__init__(parts.later, layout, options, stats)
        self.parts = parts
        self._cohorts: list[_Cohort] = []

    def _reset(self) -> None:
        super()._reset()
        self._cohorts = []

    def _iteration(self, joining: list[Sequence]) -> tuple[list[Pick], list[Sequence]]:
        """One step (compute thread): retire finished rows, one decoder-with-past step per cohort, then the
        joining prompts' encoder run and first decoder step as a new cohort."""
        left = self._retire_rows()
        left += [s for s in joining if s.cancelled and s.reserved]
        joining = [s for s in joining if not s.cancelled]
        picks: list[Pick] = []
        for cohort in self._cohorts:
            picks += self._step(cohort)
        if joining:
            picks += self._first(joining)
        self._rows = [s for c in self._cohorts for s in c.rows]
        left += [s for s in self._rows if s.done or s.cancelled]  # released now; their rows go next step
        return picks, left

    def _retire_rows(self) -> list[Sequence]:
        gone: list[Sequence] = []
        for cohort in self._cohorts:
            keep = [i for i, s in enumerate(cohort.rows) if not (s.done or s.cancelled)]
            if len(keep) < len(cohort.rows):
                gone += [s for s in cohort.rows if (s.done or s.cancelled) and s.reserved]
                cohort.keep(keep)
        self._cohorts = [c for c in self._cohorts if c.rows]
        self._rows = [s for c in self._cohorts for s in c.rows]
        return gone

    def _draw(self, rows: list[Sequence], logits: np.ndarray) -> list[Pick]:
        """The decoder engine's draw, after the forced first and last tokens (every other score to -inf)."""
        bos, eos = self.parts.forced_bos, self.parts.forced_eos
        if bos is not None or eos is not None:
            logits = np.array(logits, dtype=np.float32)
            for r, seq in enumerate(rows):
                last = seq.generated == seq.params.max_tokens - 1  # the last wins, as transformers' order has it
                token = eos if last else bos if seq.generated == 0 else None
                if token is not None and 0 <= token < logits.shape[1]:
                    logits[r] = -np.inf
                    logits[r, token] = 0.0
        return super()._draw(rows, logits)

    def _mask_feed(self, mask: np.ndarray) -> dict[str, np.ndarray]:
        return {"encoder_attention_mask": mask} if self.parts.masked else {}

    def _first(self, joining: list[Sequence]) -> list[Pick]:
        """Encode the joining prompts as one right-padded batch and run the first decoder step."""
        width = max(len(s.prompt) for s in joining)
        ids = np.full((len(joining), width), self.parts.pad_id, dtype=np.int64)
        mask = np.zeros((len(joining), width), dtype=np.int64)
        for r, seq in enumerate(joining):
            ids[r, : len(seq.prompt)] = seq.prompt
            mask[r, : len(seq.prompt)] = 1
        states = self.parts.encoder.infer({"input_ids": ids, "attention_mask": mask})["last_hidden_state"]
        start = np.full((len(joining), 1), self.parts.start_token, dtype=np.int64)
        feeds = {"input_ids": start, **self._mask_feed(mask), "encoder_hidden_states": np.asarray(states)}
        out = self.parts.decoder.infer(feeds)
        picks = self._draw(joining, np.asarray(out["logits"])[:, -1])
        cohort = _Cohort(
            list(joining), mask, self._present(out, "encoder"), self._present(out, "decoder"), _next(picks)
        )
        self._cohorts.append(cohort)
        self.stats.step(len(joining))
        return picks

    def _step(self, cohort: _Cohort) -> list[Pick]:
        """One token for every row of ``cohort`` with the decoder with past."""
        feeds = {"input_ids": cohort.next[:, None], **self._mask_feed(cohort.enc_mask)}
        for i in range(self.layout.layers):
            own, cross = cohort.own[2 * i : 2 * i + 2], cohort.cross[2 * i : 2 * i + 2]
            feeds[f"past_key_values.{i}.decoder.key"], feeds[f"past_key_values.{i}.decoder.value"] = own
            feeds[f"past_key_values.{i}.encoder.key"], feeds[f"past_key_values.{i}.encoder.value"] = cross
        out = self.parts.later.infer(feeds)
        picks = self._draw(cohort.rows, np.asarray(out["logits"])[:, -1])
        cohort.own, cohort.next = self._present(out, "decoder"), _next(picks)
        self.stats.step(len(cohort.rows))
        return picks

    def _present(self, out: dict[str, np.ndarray], side: str) -> list[np.ndarray]:
        return [
            np.asarray(out[f"present.{i}.{side}.{kind}"], dtype=np.float32)
            for i in range(self.layout.layers)
            for kind in ("key", "value")
        ]


def _next(picks: list[Pick]) -> np.ndarray:
    return np.array([t for _, t, _ in picks], dtype=np.int64)
