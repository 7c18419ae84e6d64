"""The chart's copies of generated files do not drift from their sources.

scripts/sync-chart-crds.sh writes them: the eo CRD (from `eo crd`) and the Grafana dashboard.
The alert files are generated (tests/monitoring/test_generated.py); here, the chart's defaults
must give exactly the plain Prometheus and Grafana files.
"""

from __future__ import annotations

import filecmp
import json
import shutil
import subprocess
from pathlib import Path

import yaml

from eo_jobs.spec.crd import crd_yaml
from tests.chart.helm import CHART, ROOT, chart_crds, find, render, set_values

SYNC = ROOT / "scripts" / "sync-chart-crds.sh"
EO_CRD = "exactlyoncepipelines.eo.dev.yaml"
ALERTS = ROOT / "monitoring" / "prometheus" / "eo-alerts.rules.yaml"
DASHBOARD = ROOT / "monitoring" / "grafana" / "eo-pipelines.json"
ALERTING = ROOT / "monitoring" / "grafana" / "eo-alerting.yaml"


def test_the_chart_crd_is_the_generated_crd() -> None:
    generated = crd_yaml()
    assert (ROOT / "crds" / EO_CRD).read_text() == generated, (
        "crds/ drifted: run `eo crd > crds/exactlyoncepipelines.eo.dev.yaml`"
    )
    assert chart_crds()[EO_CRD] == generated, (
        "charts/eo/crds drifted: run scripts/sync-chart-crds.sh"
    )


def test_the_chart_ships_only_the_eo_crd() -> None:
    # The operator elects its leader through a coordination.k8s.io Lease and runs kopf
    # standalone: kopf's peering CRDs are not needed.
    assert set(chart_crds()) == {EO_CRD}


def test_running_the_sync_script_changes_nothing(tmp_path: Path) -> None:
    copy = tmp_path / "eo"
    shutil.copytree(CHART, copy)
    done = subprocess.run([SYNC, copy], capture_output=True, text=True, check=True)
    assert "updated" not in done.stdout, (
        f"the chart is stale; run scripts/sync-chart-crds.sh:\n{done.stdout}"
    )
    comparison = filecmp.dircmp(CHART, copy)
    for sub in ("crds", "files"):
        nested = comparison.subdirs[sub]
        assert (nested.left_only, nested.right_only, nested.diff_files) == ([], [], []), sub


def test_the_sync_script_repairs_a_stale_chart(tmp_path: Path) -> None:
    copy = tmp_path / "eo"
    shutil.copytree(CHART, copy)
    (copy / "crds" / EO_CRD).write_text("stale\n")
    done = subprocess.run([SYNC, copy], capture_output=True, text=True, check=True)
    assert "updated crds/exactlyoncepipelines.eo.dev.yaml" in done.stdout
    assert (copy / "crds" / EO_CRD).read_bytes() == (ROOT / "crds" / EO_CRD).read_bytes()


def test_the_chart_holds_the_dashboard_json_byte_for_byte() -> None:
    assert (CHART / "files" / DASHBOARD.name).read_bytes() == DASHBOARD.read_bytes()


def test_with_default_values_the_prometheusrule_is_the_plain_rules_file() -> None:
    rule = find(
        render(set_values("monitoring.prometheusRule.enabled=true")), "PrometheusRule", "eo-alerts"
    )
    assert rule["spec"] == {"groups": yaml.safe_load(ALERTS.read_text())["groups"]}


def test_with_default_values_the_grafana_alert_configmap_is_the_plain_provisioning_file() -> None:
    configmap = find(
        render(set_values("monitoring.grafanaAlerting.enabled=true")), "ConfigMap", "eo-alerting"
    )
    assert configmap["metadata"]["labels"]["grafana_alert"] == "1"
    assert configmap["data"]["eo-alerting.yaml"] == ALERTING.read_text()


def test_the_dashboard_configmap_carries_the_dashboard_json_for_the_grafana_sidecar() -> None:
    configmap = find(
        render(
            set_values(
                "monitoring.grafanaDashboard.enabled=true",
                "monitoring.grafanaDashboard.namespace=grafana",
            )
        ),
        "ConfigMap",
        "eo-dashboards",
        "grafana",
    )
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["eo-pipelines.json"]) == json.loads(DASHBOARD.read_text())
