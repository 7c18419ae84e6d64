"""The Grafana dashboard and alert provisioning only use metrics that exist, and hold together.

A renamed metric would leave a panel silently empty; these checks catch it at test time.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from eo_jobs.audit import AuditResult, Position
from eo_jobs.runtime.metrics import DriverMetrics
from eo_jobs.spec.loading import load_pipeline
from eo_operator.metrics import PipelineHealth, PipelineMetrics, SinkHealth
from tests.monitoring.metric_names import defined_series_names, referenced_series_names

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "monitoring" / "grafana" / "eo-pipelines.json"
ALERTING = ROOT / "monitoring" / "grafana" / "eo-alerting.yaml"
RULES = ROOT / "monitoring" / "prometheus" / "eo-alerts.rules.yaml"

GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range", "__interval_ms", "__range_s"}
VARIABLE_USE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")
SELECTOR = re.compile(r'\b(eo_[a-z0-9_]+)(\{(?:[^}"]|"[^"]*")*\})?')
"""A series and its matchers; quoted matcher values may hold braces (``${namespace}``)."""
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')
EXAMPLE = ROOT / "examples" / "orders-ledger.yaml"


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def _panels() -> list[dict[str, Any]]:
    return [panel for panel in _dashboard()["panels"] if panel["type"] != "row"]


def _expressions() -> list[str]:
    return [target["expr"] for panel in _panels() for target in panel["targets"]]


def _variables() -> dict[str, dict[str, Any]]:
    return {variable["name"]: variable for variable in _dashboard()["templating"]["list"]}


def _used_variables(text: str) -> set[str]:
    return {braced or plain for braced, plain in VARIABLE_USE.findall(text)}


def test_the_dashboard_is_templated_on_datasource_namespace_and_pipeline() -> None:
    variables = _variables()
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "pipeline"):
        assert variables[name]["type"] == "query"
        assert variables[name]["multi"] and variables[name]["includeAll"]
        assert "eo_pipeline_info" in variables[name]["definition"]
    assert _dashboard()["uid"] == "eo-pipelines"


def test_every_panel_queries_the_selected_datasource() -> None:
    for panel in _panels():
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_panels_reference_only_metrics_the_operator_or_driver_define() -> None:
    defined = defined_series_names()
    for panel in _panels():
        for target in panel["targets"]:
            unknown = referenced_series_names(target["expr"]) - defined
            assert not unknown, f"panel {panel['title']!r} uses undefined {sorted(unknown)}"


def _exported_labels() -> dict[str, dict[str, str]]:
    """Series name -> labels, as the operator and a driver export them for the example pipeline.

    A driver's series get ``namespace`` from the scrape (the pod's namespace), as the chart's
    PodMonitor gives it; its own ``pipeline`` label is whatever the driver sets.
    """
    pipeline = load_pipeline(EXAMPLE)
    namespace, name = pipeline.metadata.namespace, pipeline.metadata.name
    registry = CollectorRegistry()
    operator = PipelineMetrics(registry)
    operator.observe_health(
        namespace,
        name,
        PipelineHealth(
            guarantee="exactly-once",
            epoch=1,
            phase="Running",
            driver_up=True,
            restarts=0,
            batches=1,
            failures=0,
            failure_rate=0.0,
            trigger_interval_seconds=10,
            last_commit_time=1.0,
            checkpoint_durations=(1.0,),
            commit_durations=(0.1,),
            sinks={"ledger": SinkHealth(prepared=1, max_prepared=10)},
        ),
    )
    operator.record_recovery(namespace, name, 1.0)
    operator.audit.observe(
        namespace,
        name,
        AuditResult(pipeline.key, Position(), Position({"q": 1}), 2, {"q": 3}, (), ()),
        last_batch=1,
        at=1.0,
        interval=300,
        latched=None,
    )
    DriverMetrics(pipeline.key, registry=registry).batch(1, 1.0, 0.1, {"ledger": 5})
    exported: dict[str, dict[str, str]] = {}
    for family in registry.collect():
        for sample in family.samples:
            if "pipeline" in sample.labels:
                exported[sample.name] = {"namespace": namespace, **sample.labels}
    return exported


def _interpolate(expression: str, chosen: dict[str, list[str] | None]) -> str:
    """``expression`` as Grafana sends it to Prometheus: a regex-escaped value, several as
    ``(a|b)``, or the variable's allValue ``.*`` for All (None)."""

    def value(match: re.Match[str]) -> str:
        name = match[1] or match[2]
        if name not in chosen:
            return match[0]
        values = chosen[name]
        if values is None:
            return ".*"
        escaped = [re.escape(item) for item in values]
        return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"

    return VARIABLE_USE.sub(value, expression)


def _selects(matchers: str, labels: dict[str, str]) -> bool:
    for label, operator, pattern in MATCHER.findall(matchers):
        if label in ("namespace", "pipeline"):
            assert operator == "=~", f"{label}{operator} in {matchers}"
            if not re.fullmatch(pattern, labels.get(label, "")):
                return False
    return True


def test_every_per_pipeline_selector_selects_the_chosen_pipelines_series_and_no_other() -> None:
    # The variables list eo_pipeline_info's labels; a driver labels its series pipeline="ns/name".
    exported = _exported_labels()
    info = exported["eo_pipeline_info"]
    namespace, pipeline = info["namespace"], info["pipeline"]
    choices: list[dict[str, list[str] | None]] = [
        {"namespace": [namespace], "pipeline": [pipeline]},
        {"namespace": [namespace, "other"], "pipeline": ["other", pipeline]},
        {"namespace": None, "pipeline": None},
    ]
    checked = 0
    for expression in _expressions():
        for name, matchers in SELECTOR.findall(expression):
            if name.startswith("eo_operator_"):
                continue
            assert name in exported, f"{name}: not exported by the fixture, add it"
            for choice in choices:
                filled = _interpolate(matchers, choice)
                assert _selects(filled, exported[name]), f"{name}{matchers} misses {choice}"
            other = _interpolate(matchers, {"namespace": [namespace], "pipeline": ["other"]})
            assert not _selects(other, exported[name]), f"{name}{matchers} selects 'other'"
            checked += 1
    assert checked > 20


def test_every_variable_used_is_defined() -> None:
    defined = set(_variables()) | GRAFANA_BUILTINS
    used = _used_variables(DASHBOARD.read_text())
    assert used - defined == set()


def test_the_dashboard_shows_every_headline_signal() -> None:
    expressions = "\n".join(_expressions())
    required = [
        r"rate\(eo_pipeline_batches_total",
        r"histogram_quantile\(0\.5, [^\n]*eo_pipeline_checkpoint_duration_seconds_bucket",
        r"histogram_quantile\(0\.95, [^\n]*eo_pipeline_checkpoint_duration_seconds_bucket",
        r"histogram_quantile\(0\.95, [^\n]*eo_pipeline_commit_duration_seconds_bucket",
        r"eo_pipeline_batch_failures_total",
        r"eo_pipeline_seconds_since_last_commit",
        r"eo_pipeline_in_doubt_transactions",
        r"eo_pipeline_in_doubt_oldest_age_seconds",
        r"eo_pipeline_epoch",
        r"eo_pipeline_restarts_total",
        r"eo_audit_violations_total",
        r"eo_audit_violation_latched",
        r"eo_audit_lag_batches",
        r"eo_audit_last_pass_timestamp_seconds",
    ]
    missing = [pattern for pattern in required if not re.search(pattern, expressions)]
    assert not missing


def test_panels_have_unique_ids_and_do_not_overlap_on_the_24_column_grid() -> None:
    panels = _dashboard()["panels"]
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        area = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not area & cells, f"panel {panel['title']!r} overlaps another"
        cells |= area


def test_each_query_of_a_panel_has_its_own_ref_id() -> None:
    for panel in _panels():
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]


def _grafana_rules() -> dict[str, dict[str, Any]]:
    document = yaml.safe_load(ALERTING.read_text())
    assert document["apiVersion"] == 1
    return {rule["title"]: rule for group in document["groups"] for rule in group["rules"]}


def _prometheus_rules() -> dict[str, dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return {rule["alert"]: rule for group in document["groups"] for rule in group["rules"]}


def test_grafana_alert_provisioning_holds_every_prometheus_alert_once() -> None:
    document = yaml.safe_load(ALERTING.read_text())
    for group in document["groups"]:
        assert {"orgId", "name", "folder", "interval", "rules"} <= set(group)
    assert set(_grafana_rules()) == set(_prometheus_rules())
    uids = [rule["uid"] for rule in _grafana_rules().values()]
    assert len(set(uids)) == len(uids)


def test_grafana_alerts_query_the_data_source_of_a_variable_not_a_hard_coded_uid() -> None:
    for title, rule in _grafana_rules().items():
        for query in rule["data"]:
            if query["datasourceUid"] != "__expr__":
                assert query["datasourceUid"] == "${EO_PROMETHEUS_DATASOURCE_UID}", title


@pytest.mark.parametrize("title", sorted(_prometheus_rules()))
def test_a_grafana_alert_evaluates_the_prometheus_rule_of_the_same_name(title: str) -> None:
    rule = _grafana_rules()[title]
    prometheus = _prometheus_rules()[title]
    queries = {query["refId"]: query for query in rule["data"]}
    assert rule["condition"] in queries
    condition = queries[rule["condition"]]
    assert condition["datasourceUid"] == "__expr__"
    assert condition["model"]["expression"] in queries
    source = queries[condition["model"]["expression"]]
    assert source["model"]["expr"] == prometheus["expr"]
    assert rule["for"] == prometheus.get("for", "0s")
    assert rule["labels"] == prometheus["labels"]
    # Grafana's numeric value of query A is $values.A.Value; Prometheus calls it $value.
    for key, text in prometheus["annotations"].items():
        assert rule["annotations"][key] == text.replace("$value", "$values.A.Value"), key
    assert referenced_series_names(source["model"]["expr"]) <= defined_series_names()


def _bare(expr: str) -> str:
    """``expr`` without the dashboard's selectors, whitespace and outer parentheses."""
    text = re.sub(r"\{[^{}]*\$[^{}]*\}", "", expr)
    text = re.sub(r"\s+", "", text)
    while text.count(")") > text.count("("):  # the closing parenthesis of an enclosing group
        text = text[: text.rindex(")")]
    while text.startswith("(") and text.endswith(")"):
        depth = 0
        for index, char in enumerate(text):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth == 0 and index < len(text) - 1:
                return text  # the first parenthesis closes before the end: not an outer pair
        text = text[1:-1]
    return text


def test_the_checkpoint_duration_panel_draws_the_threshold_the_alert_fires_at() -> None:
    """Issue 15 item 7: the line a user sees on the panel is the alert's own threshold."""
    rules = yaml.safe_load(RULES.read_text())
    expr = next(
        rule["expr"]
        for group in rules["groups"]
        for rule in group["rules"]
        if rule.get("alert") == "EoCheckpointDurationHigh"
    )
    fired_at = expr.split("> on (namespace, pipeline)", 1)[1].split("unless on", 1)[0]
    drawn = [
        target["expr"]
        for panel in _panels()
        for target in panel["targets"]
        if "threshold" in target.get("legendFormat", "")
        and "eo_pipeline_alert_max_checkpoint_duration_seconds" in target["expr"]
    ]
    assert len(drawn) == 1
    assert _bare(drawn[0]) == _bare(fired_at)
    assert "eo_pipeline_trigger_interval_seconds" in _bare(fired_at)
