"""Metric families about the models themselves (not their requests), built at scrape time.

Every model the repository holds appears from the first scrape, with its load
counters at 0, so an alert on ``increase(fwx_model_load_failures_total[10m])``
works from the first failure on (Prometheus cannot see an increase of a series
that appears with its first failure already counted). The served versions, the
newest one and any runtime drift (the serving runtime's version differs from
the one fwx.json recorded) are exported so a fleet can be checked for replicas
that disagree.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from fwx.errors import FwxError
from fwx.serving.drift import drift_versions

if TYPE_CHECKING:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    from fwx.serving.models import ModelManager


def model_families(manager: ModelManager) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
    """fwx_model_loads_total, fwx_model_load_failures_total, fwx_model_version_served,
    fwx_model_newest_version and fwx_model_runtime_drift from the model manager."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    loads = CounterMetricFamily("fwx_model_loads", "Successful model version loads.", labels=["model"])
    failed = CounterMetricFamily(
        "fwx_model_load_failures", "Failed model version loads (0 from start).", labels=["model"]
    )
    served = GaugeMetricFamily(
        "fwx_model_version_served",
        "1 for each model version this server routes to.",
        labels=["model", "version", "format"],
    )
    newest = GaugeMetricFamily(
        "fwx_model_newest_version", "Highest version number served, per model.", labels=["model"]
    )
    drift = GaugeMetricFamily(
        "fwx_model_runtime_drift",
        "1 when the serving runtime's version differs from the one fwx.json recorded.",
        labels=["model", "version", "format", "runtime", "recorded", "serving"],
    )
    load_counts = dict(manager.loads)
    failure_counts = dict(manager.load_failures)
    names = sorted(set(manager.models()) | set(load_counts) | set(failure_counts))
    for name in names:
        loads.add_metric([name], load_counts.get(name, 0))
        failed.add_metric([name], failure_counts.get(name, 0))
        versions = manager.versions(name)
        if versions:
            newest.add_metric([name], float(max(versions)))
        for version in versions:
            _add_version(manager, name, version, served, drift)
    yield from (loads, failed, served, newest, drift)


def _add_version(
    manager: ModelManager, name: str, version: int, served: GaugeMetricFamily, drift: GaugeMetricFamily
) -> None:
    try:
        model = manager.get(name, version)
    except FwxError:  # unloaded between listing and lookup
        return
    labels = [name, str(version), str(model.format)]
    served.add_metric(labels, 1.0)
    found = drift_versions(model.manifest, model.format, model.runtime.runtime_version)
    if found is not None:
        package, recorded, serving = found
        drift.add_metric([*labels, package, recorded, serving], 1.0 if recorded != serving else 0.0)
