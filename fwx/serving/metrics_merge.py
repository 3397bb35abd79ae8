"""One /metrics for N worker processes: merge their Prometheus text snapshots.

Why snapshots and not prometheus_client's multiprocess mode: fwx builds its
metric families from ``ModelStats`` at scrape time (nothing is pushed into
prometheus_client on the request path), and multiprocess mode only covers
metric objects that write to mmap files on every increment. Each worker
instead renders its own registry to ``metrics/worker-<i>.prom`` once a second;
whichever worker SO_REUSEPORT hands a scrape to renders itself fresh and merges
the others' snapshots (at most a second old).

Merge rules: counters and histograms add up (a dead worker's last snapshot
still counts, so totals never drop when a worker is restarted); gauges add up
(queue depth, process memory and open files) except readiness, the sandbox and
wall gauges, minima and the process start time (min), maxima, GPU gauges,
server info and the fd limit (max), and running input means/stds (the unweighted mean over live workers). The
result is a registry, so it is encoded the way the scrape asked (text 0.0.4 or
OpenMetrics).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

# a wall or the sandbox is up for the server only when it is up in every worker (a sum would read 4 for 4 workers)
_MIN = {"fwx_server_ready", "fwx_input_min", "process_start_time_seconds", "fwx_sandbox_enabled", "fwx_wall_up"}
_MAX = {"fwx_input_max", "fwx_gpu_utilization_ratio", "fwx_gpu_memory_used_bytes", "fwx_server_info", "process_max_fds"}
_MEAN = {"fwx_input_mean", "fwx_input_std"}


def _families(text: bytes) -> Iterator[Any]:
    from prometheus_client.parser import text_string_to_metric_families

    try:
        yield from text_string_to_metric_families(text.decode("utf-8", "replace"))
    except (ValueError, IndexError, KeyError, TypeError):  # torn, foreign or hostile (a peer wrote it): skip
        return


def merge(snapshots: Iterable[tuple[bytes, bool]]) -> bytes:
    """Merge ``(exposition text, alive)`` pairs into one text exposition (format 0.0.4)."""
    from prometheus_client import generate_latest

    return bytes(generate_latest(merged_registry(snapshots)))


def merged_registry(snapshots: Iterable[tuple[bytes, bool]]) -> Any:
    """A registry holding the merge of ``(exposition text, alive)`` pairs; gauges of dead workers are dropped."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

    order: list[str] = []
    meta: dict[str, tuple[str, str]] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], list[float]]] = {}
    for text, alive in snapshots:
        for fam in _families(text):
            if fam.type == "gauge" and not alive:
                continue
            if fam.name not in meta:
                order.append(fam.name)
                meta[fam.name] = (fam.documentation, fam.type)
                values[fam.name] = {}
            bucket = values[fam.name]
            for s in fam.samples:
                bucket.setdefault((s.name, tuple(sorted(s.labels.items()))), []).append(float(s.value))

    class _Merged:
        def collect(self) -> Iterator[Any]:
            for name in order:
                doc, kind = meta[name]
                metric = Metric(name, doc, kind)
                for (sample, labels), vals in values[name].items():
                    metric.add_sample(sample, dict(labels), _combine(name, kind, vals))
                yield metric

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Merged())
    return registry


def _combine(name: str, kind: str, vals: list[float]) -> float:
    if kind == "gauge":
        if name in _MIN:
            return min(vals)
        if name in _MAX:
            return max(vals)
        if name in _MEAN:
            return sum(vals) / len(vals)
    return sum(vals)
