"""Prometheus exposition of the server's counters, one registry per server.

Nothing is pushed into prometheus_client on the request path: a custom
collector turns the ``ModelStats`` of every served version into metric
families when /metrics is scraped. A per-server ``CollectorRegistry`` keeps
servers (and tests) from sharing or double-registering metrics.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from fwx.serving.metrics_models import model_families
from fwx.serving.stats import Hist, ModelStats

if TYPE_CHECKING:
    from fwx.serving.models import ModelManager

log = logging.getLogger("fwx.serving")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Metrics:
    """The registry of one server plus the stats of every served model version."""

    def __init__(self, *, device: str = "cpu") -> None:
        from prometheus_client import CollectorRegistry

        self.device = device
        self.registry = CollectorRegistry(auto_describe=False)
        self._lock = threading.Lock()
        self._models: dict[tuple[str, str], ModelStats] = {}
        self.server_failures: dict[str, int] = {}
        self.ready = False
        self.manager: ModelManager | None = None  # for the model families (set by build_dataplane)
        self.replica = replica_name()  # the environment names a replica once, at start
        self.registry.register(_Collector(self))
        register_process_metrics(self.registry)

    def add_model(self, stats: ModelStats) -> None:
        with self._lock:
            self._models[(stats.model, stats.version)] = stats

    def remove_model(self, model: str, version: str) -> None:
        with self._lock:
            self._models.pop((model, version), None)

    def models(self) -> list[ModelStats]:
        with self._lock:
            return list(self._models.values())

    def count_failure(self, reason: str) -> None:
        """A request that failed before it reached a model (bad JSON, unknown model, auth)."""
        with self._lock:
            self.server_failures[reason] = self.server_failures.get(reason, 0) + 1

    def render(self) -> bytes:
        """The Prometheus text exposition (format 0.0.4)."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)

    def negotiate(self, accept: str | None) -> tuple[bytes, str]:
        """The exposition and its content type: OpenMetrics when ``accept`` asks for it, else text 0.0.4."""
        return render_negotiated(self.registry, accept)


def register_process_metrics(registry: Any) -> None:
    """process_resident_memory_bytes, process_cpu_seconds_total, process_open_fds, ... (Linux /proc)."""
    from prometheus_client import ProcessCollector

    ProcessCollector(registry=registry)


def render_negotiated(registry: Any, accept: str | None) -> tuple[bytes, str]:
    """Prometheus content negotiation: ``application/openmetrics-text`` in Accept picks OpenMetrics."""
    from prometheus_client.exposition import choose_encoder

    encoder, content_type = choose_encoder(accept or "")
    if not content_type.startswith("application/openmetrics-text"):
        content_type = CONTENT_TYPE
    return encoder(registry), content_type


def _hist_family(name: str, doc: str, labels: list[str]) -> Any:
    from prometheus_client.core import HistogramMetricFamily

    return HistogramMetricFamily(name, doc, labels=labels)


def _add_hist(fam: Any, labels: list[str], hist: Hist) -> None:
    from prometheus_client.utils import floatToGoString

    fam.add_metric(labels, [(floatToGoString(b), n) for b, n in hist.cumulative()], hist.sum)


class _Collector:
    """Builds every fwx_* family from the stats objects at scrape time."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        mv = ["model", "version"]
        fams = {
            "ok": CounterMetricFamily("fwx_request_success", "Successful inference requests.", labels=mv),
            "fail": CounterMetricFamily(
                "fwx_request_failure", "Failed inference requests by reason.", labels=[*mv, "reason"]
            ),
            "depth": GaugeMetricFamily("fwx_queue_depth", "Requests waiting in the batch queue.", labels=mv),
            "total": _hist_family("fwx_request_duration_seconds", "Request latency inside the server.", mv),
            "queue": _hist_family("fwx_queue_duration_seconds", "Time a request waited for its batch.", mv),
            "compute": _hist_family("fwx_compute_duration_seconds", "Compute time of the batch a request ran in.", mv),
            # _count is the number of model executions, _sum the rows inferred (no separate counters)
            "batch": _hist_family("fwx_batch_size", "Rows per model execution.", mv),
        }
        data = {
            "mean": GaugeMetricFamily("fwx_input_mean", "Running mean of each input.", labels=[*mv, "input"]),
            "std": GaugeMetricFamily("fwx_input_std", "Running std of each input.", labels=[*mv, "input"]),
            "min": GaugeMetricFamily("fwx_input_min", "Smallest value seen in each input.", labels=[*mv, "input"]),
            "max": GaugeMetricFamily("fwx_input_max", "Largest value seen in each input.", labels=[*mv, "input"]),
            "rmean": GaugeMetricFamily(
                "fwx_input_recent_mean", "Mean of each input over the last window.", labels=[*mv, "input"]
            ),
            "rstd": GaugeMetricFamily(
                "fwx_input_recent_std", "Std of each input over the last window.", labels=[*mv, "input"]
            ),
            "score": _hist_family(
                "fwx_output_top_score", "Max over the last axis of float outputs, per row.", [*mv, "output"]
            ),
        }
        for st in self.metrics.models():
            self._collect_model(st, fams, data)
        yield from fams.values()
        yield from data.values()
        yield from self._server_families()
        yield from _gpu_families(self.metrics.device)

    @staticmethod
    def _collect_model(st: ModelStats, fams: dict[str, Any], data: dict[str, Any]) -> None:
        lv = [st.model, st.version]
        with st.lock:
            fams["ok"].add_metric(lv, st.success.count)
            for reason, n in sorted(st.failures.items()):
                fams["fail"].add_metric([*lv, reason], n)
            for key, hist in (
                ("total", st.h_total),
                ("queue", st.h_queue),
                ("compute", st.h_compute),
                ("batch", st.h_batch),
            ):
                _add_hist(fams[key], lv, hist)
            for name, hist in sorted(st.scores.items()):
                _add_hist(data["score"], [*lv, name], hist)
        fams["depth"].add_metric(lv, st.queue_depth())
        for name, rs in sorted(st.inputs.items()):
            for key, value in (("mean", rs.mean), ("std", rs.std), ("min", rs.min), ("max", rs.max)):
                data[key].add_metric([*lv, name], value)
        for name, window in sorted(st.recent.items()):
            recent = window.snapshot()
            data["rmean"].add_metric([*lv, name], recent.mean)
            data["rstd"].add_metric([*lv, name], recent.std)

    def _server_families(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        fail = CounterMetricFamily(
            "fwx_server_request_failure", "Requests refused before reaching a model, by reason.", labels=["reason"]
        )
        for reason, n in sorted(self.metrics.server_failures.items()):
            fail.add_metric([reason], n)
        ready = GaugeMetricFamily("fwx_server_ready", "1 when every model is loaded and warm and not draining.")
        ready.add_metric([], 1.0 if self.metrics.ready else 0.0)
        yield fail
        yield ready
        yield _sandbox_family()
        yield _walls_family()
        yield _info_family(self.metrics.replica)
        if self.metrics.manager is not None:
            yield from model_families(self.metrics.manager)


def _sandbox_family() -> Any:
    """1 when this process runs inside the Landlock sandbox (fwx.safety.sandbox), with the ABI it used."""
    from prometheus_client.core import GaugeMetricFamily

    from fwx.safety.sandbox import status

    fam = GaugeMetricFamily(
        "fwx_sandbox_enabled", "1 when model loading runs inside the Landlock sandbox.", labels=["landlock_abi"]
    )
    fam.add_metric([str(status.abi)], 1.0 if status.on else 0.0)
    return fam


def _walls_family() -> Any:
    """``fwx_wall_up{wall}``: 1 per wall standing around this worker's loading, 0 per missing one
    (``fwx.safety.walls.report``, as ``GET /v2`` lists them), so an alert can name the wall that fell."""
    from prometheus_client.core import GaugeMetricFamily

    from fwx.safety.walls import report

    fam = GaugeMetricFamily(
        "fwx_wall_up", "1 when this wall stands around model loading, 0 when missing.", labels=["wall"]
    )
    for wall in report().walls:
        fam.add_metric([wall.name], 1.0 if wall.up else 0.0)
    return fam


def replica_name() -> str:
    """This replica's identity: FWX_REPLICA, else POD_NAME (downward API), else HOSTNAME, else the host name."""
    import os
    import socket

    for var in ("FWX_REPLICA", "POD_NAME", "HOSTNAME"):
        if os.environ.get(var):
            return os.environ[var]
    return socket.gethostname()


def _info_family(replica: str) -> Any:
    """``fwx_server_info{replica, version} 1``: one series per replica, joined on ``instance`` when needed.

    An info metric rather than a constant ``replica`` label on every family: with the label, each
    restart under a new pod name would start a new copy of every model/version/bucket series even
    where the scrape target stays the same; the info metric adds one series per replica, joined
    on ``instance`` only where a dashboard needs it.
    """
    from prometheus_client.core import InfoMetricFamily

    from fwx import __version__

    fam = InfoMetricFamily("fwx_server", "Identity of this fwx serve replica.", labels=["replica", "version"])
    fam.add_metric([replica, __version__], {})
    return fam


def _gpu_families(device: str) -> Iterator[Any]:
    """GPU utilisation and memory through NVML (or torch.cuda for memory); silent when neither works."""
    if not device.startswith("cuda"):
        return
    from prometheus_client.core import GaugeMetricFamily

    util = GaugeMetricFamily("fwx_gpu_utilization_ratio", "GPU utilisation (0-1).", labels=["gpu"])
    mem = GaugeMetricFamily("fwx_gpu_memory_used_bytes", "GPU memory in use.", labels=["gpu"])
    found = _nvml_sample(util, mem) or _torch_sample(mem)
    if found:
        yield util
        yield mem


def _nvml_sample(util: Any, mem: Any) -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            util.add_metric([str(i)], pynvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0)
            mem.add_metric([str(i)], float(pynvml.nvmlDeviceGetMemoryInfo(handle).used))
        return True
    except Exception:  # noqa: BLE001 - NVML missing or no driver: GPU metrics are optional
        return False


def _torch_sample(mem: Any) -> bool:
    torch = sys.modules.get("torch")  # only if a runtime already imported it; never import it for metrics
    try:
        if torch is None or not torch.cuda.is_available():
            return False
        for i in range(torch.cuda.device_count()):
            mem.add_metric([str(i)], float(torch.cuda.memory_allocated(i)))
        return True
    except Exception:  # noqa: BLE001 - optional
        return False
