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
    assert _value(text, f"fwx_inference_count_total{{{lv}}}") == 2
    assert _value(text, f"fwx_execution_count_total{{{lv}}}") == 1
    for hist in ("fwx_request_duration_seconds", "fwx_queue_duration_seconds", "fwx_compute_duration_seconds"):
        assert _value(text, f"{hist}_count{{{lv}}}") == 1
    assert _value(text, f'fwx_batch_size_bucket{{le="2.0",{lv}}}') == 1
    assert _value(text, f"fwx_queue_depth{{{lv}}}") == 0
    li = 'input="x",model="linear",version="1"'
    assert _value(text, f"fwx_input_mean{{{li}}}") == 2.0
    assert _value(text, f"fwx_input_std{{{li}}}") == 1.0
    assert (_value(text, f"fwx_input_min{{{li}}}"), _value(text, f"fwx_input_max{{{li}}}")) == (1.0, 3.0)
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
