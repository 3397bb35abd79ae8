"""Generation's own metrics: time to first token, inter-token latency, tokens, steps and rows per step.

Counted on the event loop as tokens are delivered, exposed by a collector on
the server's registry at scrape time (nothing pushed per token).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from fwx.serving.stats import BATCH_BUCKETS, LATENCY_BUCKETS, Hist

RATE_BUCKETS = (1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0)


class GenerationStats:
    """The counters of one served version's engine."""

    def __init__(self, model: str, version: str) -> None:
        self.labels = [model, version]
        self.lock = threading.Lock()
        self.ttft = Hist(LATENCY_BUCKETS)
        self.itl = Hist(LATENCY_BUCKETS)
        self.rate = Hist(RATE_BUCKETS)
        self.rows = Hist(BATCH_BUCKETS)
        self.tokens = 0
        self.prompt_tokens = 0
        self.rejected = 0
        self._last: dict[int, float] = {}

    def token(self, key: int, submitted: float, prompt: int, count: int, now: float, final: bool) -> None:
        """Token ``count`` of request ``key`` delivered at ``now`` (event loop); ``final`` when it is the last."""
        with self.lock:
            self.tokens += 1
            last = self._last.get(key)
            if last is None:
                self.ttft.observe(now - submitted)
                self.prompt_tokens += prompt
            else:
                self.itl.observe(now - last)
            if final:
                self._last.pop(key, None)
                if now > submitted:
                    self.rate.observe(count / (now - submitted))
            else:
                self._last[key] = now

    def forget(self, key: int) -> None:
        with self.lock:
            self._last.pop(key, None)

    def step(self, rows: int) -> None:
        with self.lock:
            self.rows.observe(rows)


class GenerationCollector:
    """fwx_generate_* families for every engine the task plane holds."""

    def __init__(self, stats: dict[tuple[str, str], GenerationStats]) -> None:
        self.stats = stats
        self.started = time.monotonic()

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
        from prometheus_client.utils import floatToGoString

        mv = ["model", "version"]
        hists = {
            "ttft": HistogramMetricFamily(
                "fwx_generate_time_to_first_token_seconds", "Time to first token.", labels=mv
            ),
            "itl": HistogramMetricFamily("fwx_generate_inter_token_seconds", "Time between tokens.", labels=mv),
            "rate": HistogramMetricFamily(
                "fwx_generate_tokens_per_second", "Tokens per second of each finished request.", labels=mv
            ),
            "rows": HistogramMetricFamily("fwx_generate_step_rows", "Rows per decode step.", labels=mv),
        }
        counters = {
            "tokens": CounterMetricFamily("fwx_generate_tokens", "Tokens generated.", labels=mv),
            "prompt_tokens": CounterMetricFamily("fwx_generate_prompt_tokens", "Prompt tokens read.", labels=mv),
            "rejected": CounterMetricFamily(
                "fwx_generate_rejected", "Requests refused because the cache budget was spent.", labels=mv
            ),
        }
        for st in list(self.stats.values()):
            with st.lock:
                for key, fam in hists.items():
                    hist: Hist = getattr(st, key)
                    fam.add_metric(st.labels, [(floatToGoString(b), n) for b, n in hist.cumulative()], hist.sum)
                for key, cfam in counters.items():
                    cfam.add_metric(st.labels, getattr(st, key))
        yield from hists.values()
        yield from counters.values()
