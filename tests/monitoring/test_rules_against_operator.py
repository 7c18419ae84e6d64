"""A real Prometheus scraping the operator's real endpoint raises exactly the expected alerts.

The promtool tests feed hand-written series; this closes the gap between those series and what
``PipelineMetrics`` actually exports (names, labels, units). Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from eo_operator.metrics import PipelineHealth, PipelineMetrics, PipelinePass, SinkHealth
from tests.monitoring.prometheus_binaries import running_prometheus

DEADLINE_SECONDS = 60


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        body: bytes = response.read()
        return body


@pytest.fixture
def operator_endpoint() -> Iterator[int]:
    """The operator's metrics for a broken, a stuck and a healthy pipeline, served over HTTP."""
    metrics = PipelineMetrics(CollectorRegistry())
    metrics.leading(True)  # the leader's exposition (a standby's alone pages EoOperatorNotLeading)
    now = time.time()
    metrics.observe_health(
        "shop",
        "broken",
        PipelineHealth(
            guarantee="exactly-once",
            epoch=4,
            phase="Failed",
            driver_up=False,
            restarts=1,
            batches=50,
            failures=0,
            failure_rate=0.0,
            trigger_interval_seconds=10,
            last_commit_time=now - 3600,
            in_doubt=2,
            in_doubt_oldest_age_seconds=900,
            sinks={"warehouse": SinkHealth(prepared=95, max_prepared=100, database="pg-a:5432")},
        ),
    )
    metrics.observe_health(
        "shop",
        "healthy",
        PipelineHealth(
            guarantee="exactly-once",
            epoch=1,
            phase="Running",
            driver_up=True,
            restarts=0,
            batches=500,
            failures=1,
            failure_rate=0.002,
            trigger_interval_seconds=10,
            last_commit_time=now,
            sinks={"warehouse": SinkHealth(prepared=95, max_prepared=1000, database="pg-b:5432")},
        ),
    )
    # Running, launched an hour ago, no trigger and no commit since: stuck.
    metrics.observe_pass(
        "shop",
        "stuck",
        PipelinePass(phase="Running", driver_up=True, restarts=0, epoch=2, active_since=now - 3600),
    )
    metrics.observe_health(
        "shop",
        "stuck",
        PipelineHealth(
            guarantee="exactly-once",
            epoch=2,
            phase="Running",
            driver_up=True,
            restarts=0,
            batches=10,
            failures=0,
            failure_rate=0.0,
            trigger_interval_seconds=10,
            last_commit_time=now - 3600,
        ),
    )
    server = metrics.serve(0, addr="127.0.0.1")
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def prometheus(operator_endpoint: int, tmp_path: Path) -> Iterator[str]:
    """Prometheus 3 with the shipped rules, scraping the operator every second."""
    with running_prometheus(operator_endpoint, tmp_path) as base:
        yield base


def _active_alerts(base: str) -> set[tuple[str, str]]:
    document = json.loads(_get(f"{base}/api/v1/alerts"))
    return {
        # Per pipeline, or per database for the server-wide prepared-transactions alert.
        (
            alert["labels"]["alertname"],
            alert["labels"].get("pipeline", alert["labels"].get("database", "")),
        )
        for alert in document["data"]["alerts"]
    }


def test_the_operator_exposition_drives_the_alerts_of_a_broken_pipeline_only(
    prometheus: str,
) -> None:
    expected = {
        # Failed pages once (EoPipelineFailed); the stuck Running pipeline is EoNoRecentCommit.
        ("EoNoRecentCommit", "stuck"),
        ("EoInDoubtTransactionsStale", "broken"),
        ("EoPreparedTransactionsNearLimit", "pg-a:5432"),
        ("EoPipelineFailed", "broken"),
    }
    active: set[tuple[str, str]] = set()
    deadline = time.monotonic() + DEADLINE_SECONDS
    while time.monotonic() < deadline:
        try:
            active = _active_alerts(prometheus)
        except OSError:
            active = set()
        if active >= expected:
            break
        time.sleep(1)
    # A few more evaluations, so an alert that should not fire has had its chance to.
    time.sleep(3)
    assert _active_alerts(prometheus) == expected
