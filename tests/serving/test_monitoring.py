"""deploy/monitoring: the Prometheus rules and the Grafana dashboard match what fwx serve exports.

The rules are checked by Prometheus' own ``promtool`` (Debian's ``prometheus``
package, installed by ``make test``): ``check rules`` parses every expression,
``test rules`` runs the unit tests in fwx-rules.test.yml, which feed synthetic
series and prove each alert fires, and does not fire, when it should. Without
promtool those two tests skip; the structural checks below still run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

MONITORING = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"
RULES = MONITORING / "fwx-rules.yml"
RULE_TESTS = MONITORING / "fwx-rules.test.yml"
DASHBOARD = MONITORING / "fwx-dashboard.json"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None and not os.environ.get("FWX_REQUIRE_TOOLS"),
    reason="promtool not installed (apt-get install prometheus)",
)

#: Raw metric names (not recording rules, which have colons) in a PromQL expression.
RAW_NAME = re.compile(r"\b((?:fwx|process)_[a-z0-9_]+)\b")
RECORDED_NAME = re.compile(r"\b(fwx:[a-z0-9_:]+)")
GRAFANA_BUILTINS = {"__rate_interval", "__range", "__interval", "__all"}


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def _dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def _dashboard_exprs(dash: dict[str, Any]) -> Iterator[str]:
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            yield target["expr"]


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=300, cwd=MONITORING)


@needs_promtool
def test_promtool_checks_the_rules() -> None:
    done = _promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in done.stdout


@needs_promtool
@pytest.mark.slow
def test_promtool_unit_tests_prove_each_alert() -> None:
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    assert tested == {r["alert"] for r in _rules() if "alert" in r}, "every alert needs a promtool unit test"
    done = _promtool("test", "rules", str(RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@needs_promtool
def test_promtool_parses_every_dashboard_query(tmp_path: Path) -> None:
    """Grafana variables replaced by concrete values, each query checked as a recording rule."""
    subs = {"$__rate_interval": "5m", "$__range": "1h", "$__interval": "1m"}
    rules = []
    for i, expr in enumerate(_dashboard_exprs(_dashboard())):
        for var, value in subs.items():
            expr = expr.replace(var, value)
        rules.append({"record": f"dashboard:query_{i}", "expr": re.sub(r"\$\w+", ".*", expr)})
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = _promtool("check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


def test_rules_are_well_formed() -> None:
    """The rule format, checked without promtool: the fallback where it cannot be installed."""
    doc = yaml.safe_load(RULES.read_text())
    assert set(doc) == {"groups"}
    names = [g["name"] for g in doc["groups"]]
    assert len(names) == len(set(names))
    rules = _rules()
    recorded = {r["record"] for r in rules if "record" in r}
    for rule in rules:
        assert ("record" in rule) != ("alert" in rule), rule
        assert isinstance(rule["expr"], str)
        assert rule["expr"].strip()
        assert rule["expr"].count("(") == rule["expr"].count(")"), rule
        assert set(RECORDED_NAME.findall(rule["expr"])) <= recorded, rule
        if "record" in rule:
            assert re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", rule["record"])
        else:
            assert rule["labels"]["severity"] in {"critical", "warning", "info"}
            assert {"summary", "description"} <= set(rule["annotations"])
            assert re.fullmatch(r"\d+[smh]", rule.get("for", "0s"))
    alerts = {r["alert"] for r in rules if "alert" in r}
    assert {
        "FwxInputStdCollapsed",
        "FwxTopScoreCollapsed",
        "FwxLatencyP95OverBudget",
        "FwxModelLoadFailed",
        "FwxRuntimeVersionDrift",
        "FwxVersionSkew",
    } <= alerts


def test_thresholds_come_from_history() -> None:
    """Each data/latency alert compares with a baseline built by avg_over_time and stddev_over_time."""
    rules = {r.get("record") or r["alert"]: r["expr"] for r in _rules()}
    for prefix in ("fwx:input_std", "fwx:top_score_low", "fwx:request_latency_seconds:model_p95_5m"):
        assert "avg_over_time" in rules[f"{prefix}:baseline_mean"]
        assert "stddev_over_time" in rules[f"{prefix}:baseline_std"]
    assert "3 *" in rules["fwx:input_std:low_threshold"]
    assert "fwx:input_std:low_threshold" in rules["FwxInputStdCollapsed"]
    assert "fwx:top_score_low:high_threshold" in rules["FwxTopScoreCollapsed"]
    assert "fwx:request_latency_seconds:p95_budget" in rules["FwxLatencyP95OverBudget"]


def test_dashboard_is_a_valid_grafana_dashboard() -> None:
    dash = _dashboard()
    assert {"title", "uid", "schemaVersion", "panels", "templating", "time"} <= set(dash)
    assert isinstance(dash["schemaVersion"], int)
    assert dash["schemaVersion"] >= 36
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert {"datasource", "job", "model", "version"} <= variables
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    boxes = []
    for panel in dash["panels"]:
        g = panel["gridPos"]
        assert all(isinstance(g[k], int) for k in "hwxy"), panel["title"]
        assert 0 <= g["x"] < g["x"] + g["w"] <= 24, panel["title"]
        boxes.append((g["x"], g["y"], g["x"] + g["w"], g["y"] + g["h"], panel["title"]))
        assert panel["type"] in {"row", "timeseries", "heatmap", "stat", "table"}
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in panel["targets"]]
        assert refs, panel["title"]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            used = set(re.findall(r"\$\{?(\w+)", target["expr"]))
            assert used <= variables | GRAFANA_BUILTINS, (panel["title"], used)
    for i, a in enumerate(boxes):  # no two panels overlap
        for b in boxes[i + 1 :]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a[4], b[4])


def test_dashboard_covers_the_signals() -> None:
    text = " ".join(_dashboard_exprs(_dashboard()))
    for needle in (
        "histogram_quantile(0.5,",
        "histogram_quantile(0.95,",
        "histogram_quantile(0.99,",
        "fwx_queue_depth",
        "fwx_batch_size_bucket",
        'reason="rejected"',
        'reason="timeout"',
        "fwx_input_recent_mean",
        "fwx_input_recent_std",
        "fwx_output_top_score_bucket",
        "by (model, version",
    ):
        assert needle in text, needle
    recorded = {r["record"] for r in _rules() if "record" in r}
    assert set(RECORDED_NAME.findall(text)) <= recorded


@pytest.fixture(scope="module")
def live_metrics(tmp_path_factory: pytest.TempPathFactory, make_repo: Callable[..., Path], live_server: Any) -> str:
    """/metrics of a real server on 127.0.0.1 after one good and one bad request."""
    import numpy as np

    repo = make_repo(tmp_path_factory.mktemp("monitoring") / "repo", {"cnn": "cnn"})
    srv = live_server(repo, load_probe=False)
    assert srv.config.host == "127.0.0.1"
    x = np.random.default_rng(0).random((2, 3, 32, 32), dtype=np.float32)
    body = {"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}]}
    assert srv.request("POST", "/v2/models/cnn/infer", content=json.dumps(body)).status_code == 200
    bad = {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}]}
    assert srv.request("POST", "/v2/models/cnn/infer", content=json.dumps(bad)).status_code == 400
    text: str = srv.request("GET", "/metrics").text
    return text


def _exported(text: str) -> set[str]:
    names = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    names |= set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, re.M))
    return names


def test_every_metric_used_is_exported(live_metrics: str) -> None:
    exported = _exported(live_metrics)
    used = {name for r in _rules() for name in RAW_NAME.findall(r["expr"])}
    used |= {name for expr in _dashboard_exprs(_dashboard()) for name in RAW_NAME.findall(expr)}
    assert used, "no metric names found"
    missing = sorted(used - exported)
    assert not missing, f"used in deploy/monitoring but not in /metrics: {missing}"
    assert 'le="0.3"' in live_metrics  # the bucket the confidence rules select


@needs_promtool
def test_promtool_lints_the_live_exposition(live_metrics: str) -> None:
    """Prometheus' own linter: valid text format, counters end in _total, units in names."""
    assert PROMTOOL is not None
    done = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=live_metrics, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not done.stdout.strip(), done.stdout
