"""The chart's alerts follow the release's values: runbook address, thresholds, data source."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from tests.chart.helm import CHART, find, render, set_values
from tests.monitoring.prometheus_binaries import prometheus_binary

RULES_ON = "monitoring.prometheusRule.enabled=true"
GRAFANA_ON = "monitoring.grafanaAlerting.enabled=true"


def _rules(*expressions: str) -> list[dict[str, Any]]:
    rule = find(render(set_values(RULES_ON, *expressions)), "PrometheusRule", "eo-alerts")
    return [r for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r]


def test_every_runbook_link_starts_with_the_configured_base_url() -> None:
    base = "https://runbooks.example.com/eo/runbook.html"
    for rule in _rules(f"monitoring.runbookBaseUrl={base}"):
        assert rule["annotations"]["runbook_url"] == f"{base}#{rule['alert'].lower()}"


def test_a_relative_runbook_base_is_refused() -> None:
    with pytest.raises(helm_python.HelmValuesError, match="/monitoring/runbookBaseUrl"):
        render(set_values(RULES_ON, "monitoring.runbookBaseUrl=docs/runbook.md"))


IN_DOUBT_TEN_MINUTES = """
rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'eo_pipeline_in_doubt_oldest_age_seconds{namespace="shop",pipeline="orders"}'
        values: '600x10'
    alert_rule_test:
      - eval_time: 5m
        alertname: EoInDoubtTransactionsStale
        exp_alerts: %s
"""
FIRING = "[{exp_labels: {severity: critical, namespace: shop, pipeline: orders}}]"


@pytest.mark.parametrize(
    ("threshold", "expected"), [(None, FIRING), ("900", "[]")], ids=["default-300", "raised-900"]
)
def test_a_threshold_value_moves_the_rendered_alert(
    threshold: str | None, expected: str, tmp_path: Path
) -> None:
    # A transaction in doubt for 10 minutes pages at the default 300 s, not at 900 s.
    extra = (
        ()
        if threshold is None
        else (f"monitoring.alertThresholds.inDoubtMaxAgeSeconds={threshold}",)
    )
    rule = find(render(set_values(RULES_ON, *extra)), "PrometheusRule", "eo-alerts")
    for group in rule["spec"]["groups"]:
        for alert in group["rules"]:
            alert.pop("annotations")  # the threshold is under test here, not the wording
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]))
    (tmp_path / "case.yaml").write_text(IN_DOUBT_TEN_MINUTES % expected)
    done = subprocess.run(
        [prometheus_binary("promtool"), "test", "rules", "case.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_threshold_reaches_its_alert_and_promtool_accepts_the_result(tmp_path: Path) -> None:
    rules = _rules(
        "monitoring.alertThresholds.inDoubtMaxAgeSeconds=1200",
        "monitoring.alertThresholds.preparedTransactionsMaxRatio=0.95",
        "monitoring.alertThresholds.crashLoopMaxRelaunches=7",
    )
    exprs = {rule["alert"]: rule["expr"].strip() for rule in rules}
    assert exprs["EoInDoubtTransactionsStale"].endswith("> 1200")
    assert exprs["EoPreparedTransactionsNearLimit"].endswith("> 0.95")
    assert exprs["EoDriverCrashLooping"].endswith("> 7")
    (tmp_path / "rules.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "eo", "rules": rules}]})
    )
    done = subprocess.run(
        [prometheus_binary("promtool"), "check", "rules", tmp_path / "rules.yaml"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_threshold_out_of_range_is_refused() -> None:
    with pytest.raises(helm_python.HelmValuesError, match="preparedTransactionsMaxRatio"):
        render(set_values(RULES_ON, "monitoring.alertThresholds.preparedTransactionsMaxRatio=2"))


def _grafana_rules(*expressions: str) -> list[dict[str, Any]]:
    configmap = find(render(set_values(GRAFANA_ON, *expressions)), "ConfigMap", "eo-alerting")
    document = yaml.safe_load(configmap["data"]["eo-alerting.yaml"])
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_grafana_rules_use_the_configured_data_source_uid_or_else_grafanas_variable() -> None:
    def sources(*expressions: str) -> set[str]:
        return {
            query["datasourceUid"]
            for rule in _grafana_rules(*expressions)
            for query in rule["data"]
            if query["datasourceUid"] != "__expr__"
        }

    assert sources() == {"${EO_PROMETHEUS_DATASOURCE_UID}"}
    assert sources("monitoring.grafanaAlerting.datasourceUid=prom-main") == {"prom-main"}


def test_grafana_rules_follow_the_thresholds_and_runbook_base_too() -> None:
    rules = {
        rule["title"]: rule
        for rule in _grafana_rules(
            "monitoring.alertThresholds.crashLoopMaxRelaunches=7",
            "monitoring.runbookBaseUrl=https://runbooks.example.com/eo",
        )
    }
    assert rules["EoDriverCrashLooping"]["data"][0]["model"]["expr"].strip().endswith("> 7")
    for title, rule in rules.items():
        assert (
            rule["annotations"]["runbook_url"] == f"https://runbooks.example.com/eo#{title.lower()}"
        )


def test_a_placeholder_without_a_value_fails_the_render_naming_it(tmp_path: Path) -> None:
    chart = tmp_path / "eo"
    shutil.copytree(CHART, chart)
    rules = chart / "files" / "eo-alerts.rules.yaml"
    rules.write_text(rules.read_text().replace("${crashLoopMaxRelaunches}", "${crashLoopMax}"))
    with (
        helm_python.Chart.load(chart) as loaded,
        pytest.raises(helm_python.HelmRenderError, match=r"uses \$\{crashLoopMax\}"),
    ):
        loaded.render(set_values(RULES_ON), name="eo", namespace="eo-system", is_install=True)
