"""The operator's settings from its environment (what the chart sets): a bad value stops
``eo operator`` at start with one line naming the variable and the chart value, before it talks
to any API server."""

from __future__ import annotations

import pytest

from eo_jobs.cli import main
from eo_operator.reconciler import Settings


def test_the_chart_values_reach_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EO_MAX_REQUEUE_SECONDS", "7.5")
    monkeypatch.setenv("EO_IDLE_HEALTH_INTERVAL_SECONDS", "0")
    monkeypatch.setenv("EO_DELETE_SINK_TIMEOUT_SECONDS", "45")
    monkeypatch.setenv("EO_NODE_LOST_GRACE_SECONDS", "12")
    monkeypatch.setenv("EO_AUDIT_INTERVAL_SECONDS", "60")
    settings = Settings()
    assert settings.audit_interval == 60
    assert (settings.max_requeue, settings.idle_health_interval) == (7.5, 0)
    assert (settings.delete_sink_timeout, settings.node_lost_grace_seconds) == (45, 12)


def test_unset_or_empty_variables_keep_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EO_MAX_REQUEUE_SECONDS", raising=False)
    monkeypatch.setenv("EO_IDLE_HEALTH_INTERVAL_SECONDS", "")
    settings = Settings()
    assert (settings.max_requeue, settings.idle_health_interval) == (20, 120)


@pytest.mark.parametrize(
    ("variable", "text", "value"),
    [
        ("EO_MAX_REQUEUE_SECONDS", "0", "operator.maxRequeueSeconds"),
        ("EO_MAX_REQUEUE_SECONDS", "20s", "operator.maxRequeueSeconds"),
        ("EO_IDLE_HEALTH_INTERVAL_SECONDS", "-1", "operator.idleHealthIntervalSeconds"),
        ("EO_DELETE_SINK_TIMEOUT_SECONDS", "nan", "operator.deleteSinkTimeoutSeconds"),
        ("EO_NODE_LOST_GRACE_SECONDS", "soon", "operator.nodeLostGraceSeconds"),
        ("EO_AUDIT_INTERVAL_SECONDS", "5", "operator.auditIntervalSeconds"),
    ],
)
def test_a_bad_value_stops_the_operator_naming_the_variable_and_the_chart_value(
    monkeypatch: pytest.MonkeyPatch, variable: str, text: str, value: str
) -> None:
    monkeypatch.setenv(variable, text)
    with pytest.raises(SystemExit) as exited:
        main(["operator"])
    message = str(exited.value.code)
    assert message.startswith(f"eo operator: {variable}={text!r} is not a number of seconds")
    assert value in message
    assert "\n" not in message
