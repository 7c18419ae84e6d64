"""The driver's per-batch metrics: names, what one batch records, and no Spark needed."""

from __future__ import annotations

import subprocess
import sys
import urllib.request

import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from eo_jobs.runtime.metrics import DriverMetrics

CONTRACT = {
    "eo_driver_batch_duration_seconds": "histogram",
    "eo_driver_commit_duration_seconds": "histogram",
    "eo_driver_rows_committed": "counter",
    "eo_driver_batches_decided": "counter",
    "eo_driver_failed_attempts": "counter",
    "eo_driver_fenced_attempts": "counter",
    "eo_driver_epoch": "gauge",
    "eo_driver_last_batch_id": "gauge",
    "eo_driver_last_trigger_timestamp_seconds": "gauge",
    "eo_driver_source_offsets_behind_latest": "gauge",
}
ORDERS = {"pipeline": "orders"}


def _value(metrics: DriverMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, {**ORDERS, **labels})


def test_exposition_has_every_contract_metric_with_its_type() -> None:
    metrics = DriverMetrics("orders")
    metrics.batch(0, duration=1.0, commit_duration=0.1, rows_by_sink={"warehouse": 5})
    families = {
        family.name: family.type
        for family in text_string_to_metric_families(metrics.exposition().decode())
    }
    assert {name: families.get(name) for name in CONTRACT} == CONTRACT


def test_a_batch_records_its_durations_rows_per_sink_and_id() -> None:
    metrics = DriverMetrics("orders")
    metrics.batch(7, duration=2.0, commit_duration=0.04, rows_by_sink={"a": 100, "b": 3})
    metrics.batch(8, duration=400.0, commit_duration=0.2, rows_by_sink={"a": 50, "b": 0})
    assert _value(metrics, "eo_driver_batches_decided_total") == 2
    assert _value(metrics, "eo_driver_last_batch_id") == 8
    assert _value(metrics, "eo_driver_rows_committed_total", sink="a") == 150
    assert _value(metrics, "eo_driver_rows_committed_total", sink="b") == 3
    assert _value(metrics, "eo_driver_batch_duration_seconds_bucket", le="2.5") == 1
    assert _value(metrics, "eo_driver_batch_duration_seconds_bucket", le="600.0") == 2
    assert _value(metrics, "eo_driver_commit_duration_seconds_sum") == pytest.approx(0.24)


def test_failed_and_fenced_attempts_start_at_zero_and_count_up() -> None:
    metrics = DriverMetrics("orders")
    assert _value(metrics, "eo_driver_failed_attempts_total") == 0
    assert _value(metrics, "eo_driver_fenced_attempts_total") == 0
    metrics.failed()
    metrics.failed()
    metrics.fenced()
    assert _value(metrics, "eo_driver_failed_attempts_total") == 2
    assert _value(metrics, "eo_driver_fenced_attempts_total") == 1


def test_the_epoch_is_exported_once_set() -> None:
    metrics = DriverMetrics("orders")
    metrics.set_epoch(12)
    assert _value(metrics, "eo_driver_epoch") == 12


def test_negative_row_counts_are_refused() -> None:
    metrics = DriverMetrics("orders")
    with pytest.raises(ValueError, match="row counts must be >= 0"):
        metrics.batch(1, duration=1.0, commit_duration=0.1, rows_by_sink={"a": -1})
    assert _value(metrics, "eo_driver_batches_decided_total") == 0


def test_each_driver_gets_its_own_registry_unless_one_is_shared() -> None:
    first, second = DriverMetrics("orders"), DriverMetrics("orders")
    first.failed()
    assert _value(second, "eo_driver_failed_attempts_total") == 0
    assert REGISTRY.get_sample_value("eo_driver_failed_attempts_total", ORDERS) is None
    shared = CollectorRegistry()
    assert DriverMetrics("orders", registry=shared).registry is shared


def test_importing_the_driver_metrics_does_not_import_pyspark() -> None:
    probe = "import sys, eo_jobs.runtime.metrics; print('pyspark' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "False"


def test_serve_exposes_the_metrics_over_http() -> None:
    metrics = DriverMetrics("orders")
    metrics.set_epoch(4)
    server = metrics.serve(0, addr="127.0.0.1")
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            body = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert 'eo_driver_epoch{pipeline="orders"} 4.0' in body
