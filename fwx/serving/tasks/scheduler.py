"""Continuous batching over a decoder's exported cache graph: requests join and leave between steps.

One ``Engine`` per served version runs an iteration loop (Orca's iteration-level
scheduling): retire the rows that finished, prefill the waiting prompts as one
left-padded batch and merge their caches into the running batch, then run one
decode step for every row. Rows of different lengths share a step because the
cache is left-padded: the attention mask zeroes each row's padding and each
row's position id is its own count of real tokens. Leading columns no row uses
are trimmed, so the cache is as long as the longest row, never longer.

The cache budget is reserved per request (prompt + max_tokens, times the bytes
a token's keys and values take) when it arrives: a request that cannot fit now
is refused with 503 at once instead of waiting unboundedly. The model runs in
a worker thread; token accounting happens there, delivery on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from fwx.errors import FwxError, InputError, ServingError, UnavailableError
from fwx.serving.tasks.sampling import SamplingParams, pick

if TYPE_CHECKING:
    from fwx.runtimes.base import Runtime
    from fwx.serving.tasks.metrics import GenerationStats
    from fwx.signature import Signature

log = logging.getLogger("fwx.serving")
GiB = 2**30
Pick = tuple["Sequence", int, "str | None"]  # a row, the token drawn for it, the finish reason if it was the last


@dataclass(frozen=True)
class EngineOptions:
    """Bounds of one version's generation engine."""

    max_rows: int = 64  # rows per decode step
    cache_bytes: int = 2 * GiB  # keys and values reserved by requests in flight, all rows together
    max_waiting: int = 256  # prompts waiting to join


@dataclass(frozen=True)
class CacheLayout:
    """The cache graph's shape, read from its signature (Optimum's names)."""

    layers: int
    kv_heads: int
    head_dim: int
    positions: bool

    @classmethod
    def of(cls, sig: Signature) -> CacheLayout:
        past = [s for s in sig.inputs if s.name.startswith("past_key_values.")]
        if not past or "logits" not in sig.output_names or len(past[0].shape) != 4:
            raise InputError("the model is not a decoder with a cache (past_key_values.N.key|value in, logits out)")
        kv, dim = past[0].shape[1], past[0].shape[3]
        if not isinstance(kv, int) or not isinstance(dim, int):
            raise InputError("the cache inputs need fixed head counts and sizes (dims 1 and 3)")
        return cls(len(past) // 2, kv, dim, "position_ids" in sig.input_names)

    @property
    def bytes_per_token(self) -> int:
        return self.layers * 2 * self.kv_heads * self.head_dim * 4


@dataclass(eq=False)
class Sequence:
    """One request in the engine: its prompt, settings, and the tokens delivered to it."""

    prompt: list[int]
    params: SamplingParams
    eos: frozenset[int]
    reserved: int
    # (token, finish reason when it is the last) as drawn; None after the last; an error ends it too
    tokens: asyncio.Queue[tuple[int, str | None] | None | FwxError] = field(default_factory=asyncio.Queue)
    rng: np.random.Generator | None = None
    generated: int = 0  # drawn (compute thread)
    delivered: int = 0  # handed to the request's queue (event loop)
    done: bool = False
    cancelled: bool = False
    finish_reason: str = "length"
    t_submit: float = field(default_factory=time.perf_counter)

    def advance(self, token: int) -> str | None:
        """Count a token drawn for this row (compute thread); the row is done at EOS or max_tokens."""
        self.generated += 1
        if token in self.eos and not self.params.ignore_eos:
            self.done, self.finish_reason = True, "stop"
        elif self.generated >= self.params.max_tokens:
            self.done = True
        return self.finish_reason if self.done else None


class Engine:
    """The iteration loop of one version; ``submit`` from the event loop, tokens arrive on each sequence."""

    def __init__(self, runtime: Runtime, layout: CacheLayout, options: EngineOptions, stats: GenerationStats) -> None:
        self.runtime = runtime
        self.layout = layout
        self.options = options
        self.stats = stats
        self.reserved = 0
        self._waiting: deque[Sequence] = deque()
        self._rows: list[Sequence] = []
        self._mask = np.zeros((0, 0), dtype=np.int64)
        self._cache: list[np.ndarray] = []
        self._next = np.zeros((0,), dtype=np.int64)
        self._joining: list[Sequence] = []  # the prompts the step in flight prefills
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def running(self) -> int:
        return len(self._rows)

    @property
    def sequences(self) -> list[Sequence]:
        """The requests in the running batch, then those waiting to join (a copy)."""
        return [*self._rows, *self._waiting]

    def submit(self, prompt: list[int], params: SamplingParams, eos: frozenset[int]) -> Sequence:
        """Reserve the request's cache and queue it to join at the next step (503 when the budget is spent)."""
        if self._closed:
            raise UnavailableError("the model is unloading", hint="retry; another version may serve it")
        need = (len(prompt) + params.max_tokens) * self.layout.bytes_per_token
        if need > self.options.cache_bytes:
            raise InputError(
                f"the prompt and max_tokens need {need >> 20} MiB of cache, more than the "
                f"{self.options.cache_bytes >> 20} MiB budget",
                hint="lower max_tokens or shorten the prompt",
            )
        if self.reserved + need > self.options.cache_bytes or len(self._waiting) >= self.options.max_waiting:
            self.stats.rejected += 1
            raise UnavailableError(
                f"the generation cache is full ({self.reserved >> 20} of {self.options.cache_bytes >> 20} MiB "
                f"reserved by {len(self._rows) + len(self._waiting)} requests)",
                hint="retry after a moment, or ask for fewer max_tokens",
            )
        seq = Sequence(prompt, params, eos, need, rng=params.generator())
        self.reserved += need
        self._waiting.append(seq)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="fwx-generate")
        return seq

    def cancel(self, seq: Sequence) -> None:
        """Stop generating for ``seq`` (a client went away or a stop string matched); its row leaves next step."""
        seq.cancelled = True
        if seq in self._waiting:
            self._waiting.remove(seq)
            self._release(seq)

    def close(self) -> None:
        self._closed = True
        while self._waiting:
            self._fail(self._waiting.popleft(), UnavailableError("the model is unloading", hint="retry"))

    def _release(self, seq: Sequence) -> None:
        self.reserved -= seq.reserved
        seq.reserved = 0

    def _fail(self, seq: Sequence, exc: FwxError) -> None:
        self._release(seq)
        seq.tokens.put_nowait(exc)

    async def _run(self) -> None:
        """Iterate while any request runs or waits; the task ends when the engine is idle.

        Step k+1 starts in the compute thread before step k's tokens are handed out, so the
        event loop's per-token work (queues, metrics, and in a server the streams themselves)
        overlaps the model's run, which releases the GIL, instead of adding to every step.
        """
        loop = asyncio.get_running_loop()
        step = self._start(loop)
        while step is not None:
            try:
                picks, left = await step
            except Exception as exc:  # noqa: BLE001 - a failed step fails its rows, not the server
                log.exception("generation step failed")
                err = exc if isinstance(exc, FwxError) else ServingError(f"generation failed: {exc}")
                for seq in dict.fromkeys([*self._rows, *self._joining]):  # a joined row is in both
                    self._fail(seq, err)
                self._reset()
                step = self._start(loop)
                continue
            step = self._start(loop)
            self._deliver(picks)
            for seq in left:
                self._release(seq)

    def _start(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[tuple[list[Pick], list[Sequence]]] | None:
        """The next step in the compute thread, with the prompts that fit; None when nothing runs or waits."""
        if not (self._rows or self._waiting):
            return None
        live = sum(not (s.done or s.cancelled) for s in self._rows)  # finished rows leave at the step's start
        room = self.options.max_rows - live
        self._joining = [self._waiting.popleft() for _ in range(min(room, len(self._waiting)))]
        return loop.run_in_executor(None, self._iteration, self._joining)

    def _deliver(self, picks: list[Pick]) -> None:
        now = time.perf_counter()
        for seq, token, finish in picks:
            if not seq.cancelled:
                seq.delivered += 1
                self.stats.token(id(seq), seq.t_submit, len(seq.prompt), seq.delivered, now, finish is not None)
                seq.tokens.put_nowait((token, finish))
                if finish is not None:
                    seq.tokens.put_nowait(None)

    def _reset(self) -> None:
        self._rows = []
        self._mask = np.zeros((0, 0), dtype=np.int64)
        self._cache = []
        self._next = np.zeros((0,), dtype=np.int64)

    def _iteration(self, joining: list[Sequence]) -> tuple[list[Pick], list[Sequence]]:
        """One scheduling step (compute thread): retire, prefill and merge the joining rows, decode."""
        left = self._retire()
        picks: list[Pick] = []
        left += [s for s in joining if s.cancelled and s.reserved]
        joining = [s for s in joining if not s.cancelled]
        if joining:
            picks += self._prefill(joining)
            left += self._retire()
        if self._rows:
            picks += self._decode()
        left += [s for s in self._rows if s.done or s.cancelled]  # released now; their rows go next step
        return picks, left

    def _retire(self) -> list[Sequence]:
        keep = [i for i, s in enumerate(self._rows) if not (s.done or s.cancelled)]
        if len(keep) == len(self._rows):
            return []
        gone = [s for s in self._rows if s.done or s.cancelled]
        self._rows = [self._rows[i] for i in keep]
        self._mask, self._next = self._mask[keep], self._next[keep]
        self._cache = [c[keep] for c in self._cache]
        self._trim()
        return [s for s in gone if s.reserved]

    def _trim(self) -> None:
        """Drop the leading columns no row uses (the longest row left decides the cache's length)."""
        if not self._rows:
            self._reset()
            return
        used = self._mask.any(axis=0)
        first = int(np.argmax(used)) if used.any() else self._mask.shape[1]
        if first:
            self._mask = self._mask[:, first:]
            self._cache = [c[:, :, first:] for c in self._cache]

    def _run_model(
        self, ids: np.ndarray, mask: np.ndarray, positions: np.ndarray, cache: list[np.ndarray]
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        feeds = {"input_ids": ids, "attention_mask": mask}
        if self.layout.positions:
            feeds["position_ids"] = positions
        for i in range(self.layout.layers):
            feeds[f"past_key_values.{i}.key"], feeds[f"past_key_values.{i}.value"] = cache[2 * i], cache[2 * i + 1]
        out = self.runtime.infer(feeds)
        present = [
            np.asarray(out[f"present.{i}.{kind}"], dtype=np.float32)
            for i in range(self.layout.layers)
            for kind in ("key", "value")
        ]
        return np.asarray(out["logits"])[:, -1], present

    def _draw(self, rows: list[Sequence], logits: np.ndarray) -> list[Pick]:
        """One token per row: greedy rows in one argmax over the batch, sampled rows one by one."""
        best = logits.argmax(axis=1).tolist()
        picks = []
        for seq, token, row in zip(rows, best, logits, strict=True):
            if seq.rng is not None:
                token = pick(row, seq.params, seq.rng)
            picks.append((seq, token, seq.advance(token)))
        return picks

    def _prefill(self, joining: list[Sequence]) -> list[Pick]:
        """The joining prompts as one left-padded batch; their caches join the running batch."""
        width = max(len(s.prompt) for s in joining)
        ids = np.zeros((len(joining), width), dtype=np.int64)
        mask = np.zeros((len(joining), width), dtype=np.int64)
        for r, seq in enumerate(joining):
            ids[r, width - len(seq.prompt) :] = seq.prompt
            mask[r, width - len(seq.prompt) :] = 1
        positions = np.clip(np.cumsum(mask, axis=1) - 1, 0, None)
        lay = self.layout
        empty = np.zeros((len(joining), lay.kv_heads, 0, lay.head_dim), dtype=np.float32)
        logits, present = self._run_model(ids, mask, positions, [empty] * (2 * lay.layers))
        picks = self._draw(joining, logits)
        self._merge(joining, mask, present, np.array([t for _, t, _ in picks], dtype=np.int64))
        return picks

    def _merge(self, rows: list[Sequence], mask: np.ndarray, cache: list[np.ndarray], nxt: np.ndarray) -> None:
        if not self._rows:
            self._rows, self._mask, self._cache, self._next = list(rows), mask, cache, nxt
            return
        width = max(self._mask.shape[1], mask.shape[1])

        def left_pad(a: np.ndarray, axis: int) -> np.ndarray:
            pad = [(0, 0)] * a.ndim
            pad[axis] = (width - a.shape[axis], 0)
            return np.pad(a, pad) if pad[axis][0] else a

        self._mask = np.concatenate([left_pad(self._mask, 1), left_pad(mask, 1)])
        self._cache = [
            np.concatenate([left_pad(a, 2), left_pad(b, 2)]) for a, b in zip(self._cache, cache, strict=True)
        ]
        self._next = np.concatenate([self._next, nxt])
        self._rows += rows

    def _decode(self) -> list[Pick]:
        """One token for every running row."""
        positions = self._mask.sum(axis=1, keepdims=True)
        mask = np.concatenate([self._mask, np.ones((len(self._rows), 1), dtype=np.int64)], axis=1)
        logits, present = self._run_model(self._next[:, None], mask, positions, self._cache)
        picks = self._draw(self._rows, logits)
        self._mask, self._cache = mask, present
        self._next = np.array([t for _, t, _ in picks], dtype=np.int64)
        self.stats.step(len(self._rows))
        return picks
