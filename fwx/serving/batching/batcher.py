"""Dynamic batching: an asyncio scheduler per model version.

Scheduling rule ("batch while busy" with a refill window), chosen so that a
lone client never waits for company:

* A request that finds a free compute slot and no open window runs at once.
* While every slot is busy, requests queue (bounded by ``max_queue_size``;
  full -> 503 at once). When a batch finishes, everything compatible that is
  queued (up to ``max_batch_size`` rows) runs as the next batch.
* When a batch of *n* requests finishes and fewer than *n* are queued, the
  clients it just answered are likely to send again: the batcher waits for
  them, at most ``max_queue_delay_ms``, and goes as soon as *n* requests (or
  a full batch) are queued. At concurrency 1 that is the very next request,
  so it runs without waiting.

Compute runs in a thread pool (``workers`` threads), never on the event loop;
merging and splitting are in ``merge``, the per-model wiring in ``hooks``.
Models without a dynamic batch axis run one request at a time through the
same queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from fwx.errors import DeadlineExceededError, FwxError, ServingError, UnavailableError, first_line
from fwx.serving.batching.merge import merge, shape_key, split
from fwx.serving.stats import ModelStats

if TYPE_CHECKING:
    from fwx.serving.config import ServerConfig
    from fwx.serving.models import LoadedModel

log = logging.getLogger("fwx.serving")
Arrays = dict[str, np.ndarray]


class QueueFullError(UnavailableError):
    """The model's queue is full; the transport adds Retry-After."""

    retry_after_s = 1


class ModelExecutionError(ServingError):
    """The artifact itself failed on a request that passed the signature check: a server-side
    fault (500 / INTERNAL), not the client's input (400)."""


@dataclass(eq=False)
class _Item:
    inputs: Arrays
    rows: int
    key: tuple[Any, ...]
    future: asyncio.Future[Arrays]
    enqueued: int = field(default_factory=time.perf_counter_ns)
    timer: asyncio.TimerHandle | None = None


class Batcher:
    """Queue, merge, run and split the requests of one model version."""

    def __init__(self, model: LoadedModel, config: ServerConfig, stats: ModelStats) -> None:
        self.name = f"{model.name}/{model.version}"
        self._runtime = model.runtime
        self._batchable = bool(model.batchable)
        self._max_rows = config.max_batch_size
        self._delay = config.max_queue_delay_ms / 1000.0
        self._max_queue = config.max_queue_size
        self._slots = config.instances
        self._stats = stats
        self._queue: deque[_Item] = deque()
        self._running = 0
        self._expect = 0
        self._window: asyncio.TimerHandle | None = None
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._jobs: queue.SimpleQueue[list[_Item] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        stats.queue_depth = self.depth

    def depth(self) -> int:
        """Requests waiting (not running)."""
        return len(self._queue)

    @property
    def idle(self) -> bool:
        return not self._queue and self._running == 0

    async def submit(self, inputs: Arrays, rows: int, deadline: float | None) -> Arrays:
        """Queue one request and wait for its own slice of the batch outputs."""
        if self._closed:
            raise UnavailableError(f"model {self.name} is unloading", hint="retry; another version may serve it")
        if len(self._queue) >= self._max_queue:
            raise QueueFullError(
                f"model {self.name} has {len(self._queue)} requests queued (the limit)",
                hint="retry after a moment or raise --max-queue-size",
            )
        loop = self._loop or self._bind_loop()
        item = _Item(inputs, rows, shape_key(inputs) if self._batchable else (), loop.create_future())
        if deadline is not None:
            item.timer = loop.call_at(deadline, self._expire, item)
        self._queue.append(item)
        if self._window is None:
            self._dispatch()
        elif len(self._queue) >= self._expect or self._queued_rows() >= self._max_rows:
            self._close_window()
            self._dispatch()
        try:
            return await item.future
        finally:
            if item.timer is not None:
                item.timer.cancel()

    def _bind_loop(self) -> asyncio.AbstractEventLoop:
        self._loop = asyncio.get_running_loop()
        return self._loop

    def _queued_rows(self) -> int:
        return sum(it.rows for it in self._queue)

    def _expire(self, item: _Item) -> None:
        if not item.future.done():
            item.future.set_exception(
                DeadlineExceededError(
                    f"request to {self.name} ran past its deadline", hint="raise the timeout or lower the load"
                )
            )
        with contextlib.suppress(ValueError):  # already running: its result will be dropped
            self._queue.remove(item)

    def _close_window(self) -> None:
        if self._window is not None:
            self._window.cancel()
            self._window = None

    def _on_window_end(self) -> None:
        self._window = None
        self._dispatch()

    def _dispatch(self) -> None:
        while self._running < self._slots and self._queue:
            batch = self._take()
            if batch:
                self._launch(batch)

    def _take(self) -> list[_Item]:
        """The oldest live request plus every compatible one behind it, up to max batch rows."""
        queue = self._queue
        while queue and queue[0].future.done():
            queue.popleft()
        if not queue:
            return []
        head = queue.popleft()
        batch, rows = [head], head.rows
        if not self._batchable or rows >= self._max_rows:
            return batch
        skipped: list[_Item] = []
        while queue and rows < self._max_rows:
            it = queue.popleft()
            if it.future.done():
                continue
            if it.key == head.key and rows + it.rows <= self._max_rows:
                batch.append(it)
                rows += it.rows
            else:
                skipped.append(it)
        queue.extendleft(reversed(skipped))
        return batch

    def _launch(self, batch: list[_Item]) -> None:
        if len(self._threads) < self._slots:
            self._start_thread()
        self._running += 1
        self._jobs.put(batch)

    def _start_thread(self) -> None:
        """Compute threads of our own: a SimpleQueue hand-off costs about half of run_in_executor's."""
        thread = threading.Thread(target=self._work, name=f"fwx-{self.name}-{len(self._threads)}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _work(self) -> None:
        loop = self._loop
        assert loop is not None
        while (batch := self._jobs.get()) is not None:
            results = self._compute(batch)
            try:
                loop.call_soon_threadsafe(self._on_done, batch, results)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                return

    def _on_done(self, batch: list[_Item], results: list[Any]) -> None:
        self._running -= 1
        for item, res in zip(batch, results, strict=True):
            if item.future.done():
                continue
            if isinstance(res, BaseException):
                item.future.set_exception(res)
            else:
                item.future.set_result(res)
        if self._closed:
            return
        n = len(batch)
        if self._delay > 0 and len(self._queue) < n and self._queued_rows() < self._max_rows:
            self._expect = n
            self._close_window()
            assert self._loop is not None
            self._window = self._loop.call_later(self._delay, self._on_window_end)
        else:
            self._dispatch()

    def _compute(self, batch: list[_Item]) -> list[Any]:
        """Runs in a compute thread: merge, infer, split, record. Never raises."""
        t0 = time.perf_counter_ns()
        queue_ns = [t0 - it.enqueued for it in batch]
        try:
            merged = merge([it.inputs for it in batch])
            t1 = time.perf_counter_ns()
            outputs = self._runtime.infer(merged)
            t2 = time.perf_counter_ns()
            parts: list[Any] = split(outputs, [it.rows for it in batch])
            t3 = time.perf_counter_ns()
        except BaseException as exc:  # noqa: BLE001 - turned into per-request errors below
            if len(batch) > 1:
                return self._compute_alone(batch)
            return [self._error(exc)]
        self._stats.record_batch(queue_ns, sum(it.rows for it in batch), t1 - t0, t2 - t1, t3 - t2)
        try:
            self._stats.observe_data(merged, outputs)
        except Exception:  # noqa: BLE001 - statistics must never fail a request
            log.debug("could not update data statistics of %s", self.name, exc_info=True)
        return parts

    def _compute_alone(self, batch: list[_Item]) -> list[Any]:
        """A merged batch failed: run each request alone so only the bad one fails."""
        return [self._compute([it])[0] for it in batch]

    def _error(self, exc: BaseException) -> FwxError:
        if isinstance(exc, FwxError):
            return exc
        log.warning(
            "model %s failed on a request: %s", self.name, first_line(exc), exc_info=log.isEnabledFor(logging.DEBUG)
        )
        return ModelExecutionError(
            f"model {self.name} failed on this request: {first_line(exc)}",
            hint="the artifact raised while running valid inputs; check the server log "
            "and the model's value ranges, or re-export it",
        )

    async def drain(self, timeout: float) -> bool:
        """Wait until nothing is queued or running (True) or ``timeout`` passes (False)."""
        self._close_window()
        if self._queue and self._running < self._slots and self._loop is not None:
            self._dispatch()
        end = time.monotonic() + timeout
        while not self.idle:
            if time.monotonic() >= end:
                return False
            await asyncio.sleep(0.01)
        return True

    def close(self) -> None:
        """Refuse new requests, fail what is still queued, release the threads."""
        self._closed = True
        self._close_window()
        while self._queue:
            item = self._queue.popleft()
            if not item.future.done():
                item.future.set_exception(UnavailableError(f"model {self.name} was unloaded", hint="retry"))
        for _ in self._threads:
            self._jobs.put(None)  # each thread exits after its current batch
