"""The shipped Prometheus alert rules are valid, tested by promtool, and documented.

promtool is built by ``scripts/install-promtool.sh`` into the tool cache (see prometheus_binaries).
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.monitoring.metric_names import defined_series_names, referenced_series_names
from tests.monitoring.prometheus_binaries import (
    INSTALLER,
    prometheus_binary,
    prometheus_version,
)

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "monitoring" / "prometheus" / "eo-alerts.rules.yaml"
RULE_TESTS = sorted((ROOT / "monitoring" / "prometheus" / "tests").glob("*.test.yaml"))
RUNBOOK = ROOT / "docs" / "runbook.md"
RUNBOOK_BASE_URL = "https://github.com/eo-dev/eo/blob/main/docs/runbook.md"
OPERATOR_ALERTS = {"EoOperatorNotLeading"}
"""Alerts about the operator as a whole, which carry no pipeline labels."""

EXPECTED_ALERTS = {
    "EoCheckpointDurationHigh",
    "EoFailureRateHigh",
    "EoNoRecentCommit",
    "EoInDoubtTransactionsStale",
    "EoPreparedTransactionsNearLimit",
    "EoDriverCrashLooping",
    "EoDriverNotStarting",
    "EoDriverHung",
    "EoFinalizedWithoutSink",
    "EoPipelineFailed",
    "EoAuditViolation",
    "EoAuditStale",
    "EoOperatorNotLeading",
    "EoOperatorNotReconciling",
    "EoAuditFallingBehind",
}


def _alerts() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"] if "alert" in rule]


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(arg) for arg in args], capture_output=True, text=True, timeout=120, check=False
    )


def test_promtool_accepts_the_rules_file() -> None:
    result = _run(prometheus_binary("promtool"), "check", "rules", RULES)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in result.stdout + result.stderr


@pytest.mark.parametrize("rule_test", RULE_TESTS, ids=[path.stem for path in RULE_TESTS])
def test_promtool_unit_tests_pass(rule_test: Path) -> None:
    result = _run(prometheus_binary("promtool"), "test", "rules", rule_test)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_installer_does_nothing_but_print_the_version_once_promtool_is_cached() -> None:
    prometheus_binary("promtool")
    started = time.monotonic()
    result = _run(INSTALLER)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith(f"promtool, version {prometheus_version()} "), result.stdout
    assert "building" not in result.stdout
    assert time.monotonic() - started < 30


def test_the_rules_file_holds_exactly_the_documented_alerts_in_group_eo_rules() -> None:
    document = yaml.safe_load(RULES.read_text())
    assert [group["name"] for group in document["groups"]] == ["eo.rules"]
    assert {rule["alert"] for rule in _alerts()} == EXPECTED_ALERTS


def test_every_alert_has_a_promtool_case_that_fires_it_and_one_that_stays_quiet() -> None:
    fired: set[str] = set()
    quiet: set[str] = set()
    for path in RULE_TESTS:
        document = yaml.safe_load(path.read_text())
        assert document["rule_files"] == ["../eo-alerts.rules.yaml"], path
        for case in document["tests"]:
            for check in case.get("alert_rule_test", []):
                (fired if check["exp_alerts"] else quiet).add(check["alertname"])
    assert fired == EXPECTED_ALERTS, f"alerts never fired by a test: {EXPECTED_ALERTS - fired}"
    assert quiet == EXPECTED_ALERTS, f"alerts never held quiet: {EXPECTED_ALERTS - quiet}"


@pytest.mark.parametrize("name", sorted(EXPECTED_ALERTS))
def test_an_alert_names_the_pipeline_its_value_severity_and_runbook(name: str) -> None:
    (rule,) = [rule for rule in _alerts() if rule["alert"] == name]
    assert rule["labels"]["severity"] in {"warning", "critical"}
    annotations = rule["annotations"]
    assert annotations["summary"]
    if name not in OPERATOR_ALERTS:  # about the operator itself: no pipeline to name
        assert "{{ $labels.namespace }}/{{ $labels.pipeline }}" in annotations["description"]
    assert "$value" in annotations["description"]
    # Absolute: Alertmanager, PagerDuty and Slack cannot follow a relative link.
    assert annotations["runbook_url"] == f"{RUNBOOK_BASE_URL}#{name.lower()}"


def test_every_alert_has_a_runbook_section_under_its_anchor() -> None:
    # A heading "## EoName" gets the anchor "#eoname", the one runbook_url points at.
    headings = set(re.findall(r"^## (\S+)\s*$", RUNBOOK.read_text(), flags=re.MULTILINE))
    missing = {rule["alert"] for rule in _alerts()} - headings
    assert not missing, f"docs/runbook.md lacks a '## <alert>' section for {sorted(missing)}"


def test_rules_use_only_metrics_that_the_operator_or_driver_export() -> None:
    defined = defined_series_names()
    for rule in _alerts():
        unknown = referenced_series_names(rule["expr"]) - defined
        assert not unknown, f"{rule['alert']} uses undefined series {sorted(unknown)}"
