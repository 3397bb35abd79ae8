"""/metrics: request, latency, batch, queue and data statistics, per model and version."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, make_repo: Callable[..., Path], live_server: Any) -> Any:
    repo = make_repo(tmp_path_factory.mktemp("metrics") / "repo", {"linear": "linear", "cnn": "cnn"})
    return live_server(repo, load_probe=False)


def _value(text: str, metric: str) -> float:
    m = re.search(rf"^{re.escape(metric)} (\S+)$", text, re.M)
    assert m, f"{metric} not in /metrics"
    return float(m.group(1))


def test_metrics_are_exposed_and_updated(srv: Any) -> None:
    body = {"inputs": [{"name": "x", "shape": [2, 1], "datatype": "FP32", "data": [1.0, 3.0]}]}
    assert srv.request("POST", "/v2/models/linear/infer", content=json.dumps(body)).status_code == 200
    r = srv.request("GET", "/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    text = r.text
    lv = 'model="linear",version="1"'
    assert _value(text, f"fwx_request_success_total{{{lv}}}") == 1
    # rows inferred and executions are the batch-size histogram's _sum and _count (no *_count_total)
    assert _value(text, f"fwx_batch_size_sum{{{lv}}}") == 2
    assert _value(text, f"fwx_batch_size_count{{{lv}}}") == 1
    assert "_count_total" not in text
    for hist in ("fwx_request_duration_seconds", "fwx_queue_duration_seconds", "fwx_compute_duration_seconds"):
        assert _value(text, f"{hist}_count{{{lv}}}") == 1
    assert _value(text, f'fwx_batch_size_bucket{{le="2.0",{lv}}}') == 1
    assert _value(text, f"fwx_queue_depth{{{lv}}}") == 0
    li = 'input="x",model="linear",version="1"'
    assert _value(text, f"fwx_input_mean{{{li}}}") == 2.0
    assert _value(text, f"fwx_input_std{{{li}}}") == 1.0
    assert (_value(text, f"fwx_input_min{{{li}}}"), _value(text, f"fwx_input_max{{{li}}}")) == (1.0, 3.0)
    assert _value(text, f"fwx_input_recent_mean{{{li}}}") == 2.0
    assert _value(text, f"fwx_input_recent_std{{{li}}}") == 1.0
    lo = 'model="linear",output="y",version="1"'
    assert _value(text, f"fwx_output_top_score_count{{{lo}}}") == 2
    assert _value(text, f"fwx_output_top_score_sum{{{lo}}}") == 3.0 + 7.0
    assert _value(text, "fwx_server_ready") == 1
    assert _value(text, 'fwx_model_loads_total{model="cnn"}') == 1


def test_failures_are_counted_by_reason(srv: Any) -> None:
    bad = {"inputs": [{"name": "x", "shape": [1, 1], "datatype": "INT64", "data": [1]}]}
    srv.request("POST", "/v2/models/cnn/infer", content=json.dumps(bad))
    srv.request("POST", "/v2/models/nope/infer", content=json.dumps(bad))
    text = srv.request("GET", "/metrics").text
    assert _value(text, 'fwx_request_failure_total{model="cnn",reason="invalid",version="1"}') == 1
    assert _value(text, 'fwx_server_request_failure_total{reason="not_found"}') >= 1


def test_running_stats_merge_batches() -> None:
    import numpy as np

    from fwx.serving.stats import RunningStats

    rng = np.random.default_rng(0)
    parts = [rng.standard_normal(n) * 3 + 1 for n in (5, 50, 1, 300)]
    rs = RunningStats()
    for p in parts:
        rs.update(p)
    allv = np.concatenate(parts)
    assert rs.count == allv.size
    assert rs.mean == pytest.approx(allv.mean())
    assert rs.std == pytest.approx(allv.std())
    assert (rs.min, rs.max) == (allv.min(), allv.max())


def test_model_families_exist_from_start(srv: Any) -> None:
    text = srv.request("GET", "/metrics").text
    for model in ("linear", "cnn"):
        assert _value(text, f'fwx_model_load_failures_total{{model="{model}"}}') == 0
        assert _value(text, f'fwx_model_newest_version{{model="{model}"}}') == 1
    assert re.search(r'^fwx_model_version_served\{format="\w+",model="linear",version="1"\} 1\.0$', text, re.M)
    assert "# TYPE fwx_model_runtime_drift gauge" in text


def test_process_metrics(srv: Any) -> None:
    import os

    text = srv.request("GET", "/metrics").text
    assert _value(text, "process_resident_memory_bytes") > 10 * 2**20
    assert _value(text, "process_cpu_seconds_total") > 0
    assert 3 <= _value(text, "process_open_fds") <= len(os.listdir("/proc/self/fd")) + 5


def test_openmetrics_is_negotiated(srv: Any) -> None:
    om = srv.request("GET", "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert om.headers["content-type"].startswith("application/openmetrics-text")
    assert om.text.rstrip().endswith("# EOF")
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families(om.text)}  # a strict OpenMetrics parser
    assert families["fwx_request_success"].type == "counter"
    assert families["fwx_request_duration_seconds"].type == "histogram"
    plain = srv.request("GET", "/metrics", headers={"Accept": "text/plain"})
    assert plain.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "# EOF" not in plain.text


def test_window_stats_follow_recent_batches() -> None:
    import numpy as np

    from fwx.serving.stats import RunningStats, WindowStats

    w = WindowStats(window_s=10)
    rng = np.random.default_rng(1)
    w.update(RunningStats.of(rng.standard_normal(1000)), now=w._start + 1)
    assert w.snapshot().std == pytest.approx(1.0, abs=0.1)
    w.update(RunningStats.of(np.zeros(100)), now=w._start + 11)  # a dead pipeline: blank inputs
    assert w.snapshot().std == pytest.approx(1.0, abs=0.1)  # last complete window still the good one
    w.update(RunningStats.of(np.zeros(100)), now=w._start + 10)
    assert w.snapshot().std == 0.0
