"""Per model-version counters: one source for Triton statistics JSON and /metrics.

Updates are plain Python ints under one uncontended lock (a few hundred ns),
histograms are bucket lists filled with ``bisect`` or, for whole batches, one
``np.searchsorted``; Prometheus families are only built when /metrics is
scraped. Data statistics (input mean/std/min/max, top output scores) are taken
from whole batches in the compute thread and sampled at most every
``DATA_SAMPLE_S`` so they stay cheap at high request rates.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0, 2.0, 5.0, 10.0)
DATA_SAMPLE_S = 0.005
#: Length of the tumbling window behind fwx_input_recent_{mean,std}: short enough that a dead
#: upstream pipeline shows within ~2 windows, long enough to hold many sampled batches.
RECENT_WINDOW_S = 10.0


class Hist:
    """A fixed-bucket histogram (counts per bucket, not cumulative)."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def observe_many(self, values: np.ndarray) -> None:
        if values.size == 0:
            return
        idx = np.searchsorted(self.bounds, values, side="left")
        for i, n in enumerate(np.bincount(idx, minlength=len(self.counts)).tolist()):
            self.counts[i] += n
        self.sum += float(values.sum(dtype=np.float64))
        self.count += int(values.size)

    def cumulative(self) -> list[tuple[float, int]]:
        out, acc = [], 0
        for bound, n in zip([*self.bounds, float("inf")], self.counts, strict=True):
            acc += n
            out.append((bound, acc))
        return out


@dataclass
class RunningStats:
    """Count, mean, M2 (for std), min and max merged batch by batch (Chan et al.)."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0
    min: float = float("inf")
    max: float = float("-inf")

    def update(self, arr: np.ndarray) -> None:
        self.merge(RunningStats.of(arr))

    @staticmethod
    def of(arr: np.ndarray) -> RunningStats:
        """The statistics of one array (numpy reductions in float64)."""
        n = int(arr.size)
        if n == 0:
            return RunningStats()
        return RunningStats(
            n,
            float(arr.mean(dtype=np.float64)),
            float(arr.var(dtype=np.float64)) * n,
            float(arr.min()),
            float(arr.max()),
        )

    def merge(self, other: RunningStats) -> None:
        n = other.count
        if n == 0:
            return
        total = self.count + n
        delta = other.mean - self.mean
        self.mean += delta * n / total
        self.m2 += other.m2 + delta * delta * self.count * n / total
        self.count = total
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)

    @property
    def std(self) -> float:
        return (self.m2 / self.count) ** 0.5 if self.count else 0.0


class WindowStats:
    """Input statistics over the last complete ``window_s`` of sampled batches (tumbling windows).

    The running stats since start barely move when an upstream pipeline starts sending blank
    images after hours of good ones; alerts need the recent value, and Prometheus keeps history.
    """

    def __init__(self, window_s: float = RECENT_WINDOW_S) -> None:
        self.window_s = window_s
        self.current = RunningStats()
        self.last: RunningStats | None = None
        self._start = time.monotonic()

    def update(self, batch: RunningStats, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if now - self._start >= self.window_s:
            if self.current.count:
                self.last = self.current
            self.current = RunningStats()
            self._start = now
        self.current.merge(batch)

    def snapshot(self) -> RunningStats:
        """The last complete window, or the current one before the first window closes."""
        return self.last if self.last is not None else self.current


@dataclass
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, n: int = 1) -> None:
        self.count += n
        self.ns += ns

    def to_json(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass
class _BatchRow:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


class ModelStats:
    """Everything measured for one served model version."""

    def __init__(self, model: str, version: str) -> None:
        self.model = model
        self.version = version
        self.lock = threading.Lock()
        self.success = Duration()
        self.fail = Duration()
        self.queue = Duration()
        self.compute_input = Duration()
        self.compute_infer = Duration()
        self.compute_output = Duration()
        self.inference_count = 0
        self.execution_count = 0
        self.last_inference_ms = 0
        self.failures: dict[str, int] = {}
        self.batches: dict[int, _BatchRow] = {}
        self.h_total = Hist(LATENCY_BUCKETS)
        self.h_queue = Hist(LATENCY_BUCKETS)
        self.h_compute = Hist(LATENCY_BUCKETS)
        self.h_batch = Hist(BATCH_BUCKETS)
        self.inputs: dict[str, RunningStats] = {}
        self.recent: dict[str, WindowStats] = {}
        self.scores: dict[str, Hist] = {}
        self.queue_depth: Callable[[], int] = lambda: 0
        self._next_sample = 0.0

    def record_request(self, ok: bool, ns: int, reason: str = "") -> None:
        """Called once per request by the data plane (event-loop thread)."""
        with self.lock:
            if ok:
                self.success.add(ns)
            else:
                self.fail.add(ns)
                self.failures[reason] = self.failures.get(reason, 0) + 1
            self.h_total.observe(ns * 1e-9)

    def record_batch(self, queue_ns: Sequence[int], rows: int, t_in: int, t_infer: int, t_out: int) -> None:
        """Called once per executed batch from the compute thread."""
        compute = t_in + t_infer + t_out
        n = len(queue_ns)
        with self.lock:
            self.execution_count += 1
            self.inference_count += rows
            self.last_inference_ms = int(time.time() * 1000)
            self.h_batch.observe(rows)
            for q in queue_ns:
                self.queue.add(q)
                self.h_queue.observe(q * 1e-9)
                self.h_compute.observe(compute * 1e-9)
            self.compute_input.add(t_in * n, n)
            self.compute_infer.add(t_infer * n, n)
            self.compute_output.add(t_out * n, n)
            row = self.batches.get(rows)
            if row is None:
                row = self.batches[rows] = _BatchRow()
            row.compute_input.add(t_in)
            row.compute_infer.add(t_infer)
            row.compute_output.add(t_out)

    def observe_data(self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray]) -> None:
        """Input running stats and top-score histogram, from at most one batch per ``DATA_SAMPLE_S``."""
        now = time.monotonic()
        if now < self._next_sample:
            return
        self._next_sample = now + DATA_SAMPLE_S
        for name, arr in inputs.items():
            if arr.dtype.kind in "biuf" and arr.size:
                batch = RunningStats.of(arr)
                stats = self.inputs.get(name) or self.inputs.setdefault(name, RunningStats())
                stats.merge(batch)
                window = self.recent.get(name) or self.recent.setdefault(name, WindowStats())
                window.update(batch, now)
        for name, arr in outputs.items():
            if arr.dtype.kind == "f" and arr.size:
                top = arr.max(axis=-1).ravel() if arr.ndim >= 2 else arr.ravel()
                hist = self.scores.get(name) or self.scores.setdefault(name, Hist(SCORE_BUCKETS))
                with self.lock:
                    hist.observe_many(top.astype(np.float64, copy=False))

    def triton_json(self) -> dict[str, Any]:
        """This version's entry of Triton's ``model_stats`` list."""
        with self.lock:
            return {
                "name": self.model,
                "version": self.version,
                "last_inference": self.last_inference_ms,
                "inference_count": self.inference_count,
                "execution_count": self.execution_count,
                "inference_stats": {
                    "success": self.success.to_json(),
                    "fail": self.fail.to_json(),
                    "queue": self.queue.to_json(),
                    "compute_input": self.compute_input.to_json(),
                    "compute_infer": self.compute_infer.to_json(),
                    "compute_output": self.compute_output.to_json(),
                    "cache_hit": {"count": 0, "ns": 0},
                    "cache_miss": {"count": 0, "ns": 0},
                },
                "batch_stats": [
                    {
                        "batch_size": size,
                        "compute_input": r.compute_input.to_json(),
                        "compute_infer": r.compute_infer.to_json(),
                        "compute_output": r.compute_output.to_json(),
                    }
                    for size, r in sorted(self.batches.items())
                ],
            }
