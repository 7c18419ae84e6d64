"""The operator's pipeline-health metrics: names, one-hot phases, monotonic counters, cleanup."""

from __future__ import annotations

import urllib.request
from dataclasses import replace

import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from eo_operator.metrics import (
    PHASES,
    PipelineHealth,
    PipelineMetrics,
    PipelinePass,
    SinkHealth,
)

CONTRACT = {
    "eo_pipeline_info": "gauge",
    "eo_pipeline_epoch": "gauge",
    "eo_pipeline_restarts": "counter",
    "eo_pipeline_phase": "gauge",
    "eo_pipeline_driver_up": "gauge",
    "eo_pipeline_last_batch_id": "gauge",
    "eo_pipeline_last_commit_timestamp_seconds": "gauge",
    "eo_pipeline_seconds_since_last_commit": "gauge",
    "eo_pipeline_checkpoint_duration_seconds": "histogram",
    "eo_pipeline_commit_duration_seconds": "histogram",
    "eo_pipeline_batches": "counter",
    "eo_pipeline_batch_failures": "counter",
    "eo_pipeline_failure_rate_ratio": "gauge",
    "eo_pipeline_trigger_interval_seconds": "gauge",
    "eo_pipeline_alert_max_checkpoint_duration_seconds": "gauge",
    "eo_pipeline_alert_max_failure_rate_ratio": "gauge",
    "eo_pipeline_in_doubt_transactions": "gauge",
    "eo_pipeline_in_doubt_oldest_age_seconds": "gauge",
    "eo_pipeline_in_doubt_resolutions": "counter",
    "eo_pipeline_fenced_attempts": "counter",
    "eo_pipeline_start_timeouts": "counter",
    "eo_pipeline_recoveries": "counter",
    "eo_pipeline_recovery_duration_seconds": "histogram",
    "eo_sink_prepared_transactions": "gauge",
    "eo_sink_max_prepared_transactions": "gauge",
    "eo_operator_reconcile_duration_seconds": "histogram",
    "eo_operator_reconcile_errors": "counter",
    "eo_operator_api_requests": "counter",
    "eo_pipeline_last_observed_timestamp_seconds": "gauge",
}

ORDERS = {"namespace": "shop", "pipeline": "orders"}


def _health(**changes: object) -> PipelineHealth:
    health = PipelineHealth(
        guarantee="exactly-once",
        epoch=3,
        phase="Running",
        driver_up=True,
        restarts=0,
        batches=10,
        failures=1,
        failure_rate=0.1,
        trigger_interval_seconds=10,
        last_batch_id=9,
        last_commit_time=1_000.0,
        in_doubt=2,
        in_doubt_oldest_age_seconds=42.0,
        sinks={"warehouse": SinkHealth(prepared=5, max_prepared=64)},
    )
    return replace(health, **changes)  # type: ignore[arg-type]


class Clock:
    """A settable wall clock, so scrape-time values are exact."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(1_060.0)


@pytest.fixture
def metrics(clock: Clock) -> PipelineMetrics:
    return PipelineMetrics(CollectorRegistry(), clock=clock)


def _value(metrics: PipelineMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def _series_of(metrics: PipelineMetrics, pipeline: str) -> list[str]:
    families = text_string_to_metric_families(metrics.exposition().decode())
    return [
        sample.name
        for family in families
        for sample in family.samples
        if sample.labels.get("pipeline") == pipeline
    ]


def test_exposition_has_every_contract_metric_with_its_type(metrics: PipelineMetrics) -> None:
    metrics.observe_health("shop", "orders", _health(checkpoint_durations=(1.0,)))
    metrics.observe_pass("shop", "orders", PipelinePass("Running", True, 0, 3, None))
    metrics.count_api_request("GET")
    families = {
        family.name: family.type
        for family in text_string_to_metric_families(metrics.exposition().decode())
    }
    assert {name: families.get(name) for name in CONTRACT} == CONTRACT


def test_exactly_one_of_the_nine_phases_is_one(metrics: PipelineMetrics) -> None:
    metrics.observe_health("shop", "orders", _health(phase="Running"))
    metrics.observe_health("shop", "orders", _health(phase="Backoff"))
    values = {
        phase: _value(metrics, "eo_pipeline_phase", **ORDERS, phase=phase) for phase in PHASES
    }
    assert len(values) == 9
    assert values == {phase: float(phase == "Backoff") for phase in PHASES}


def test_a_fresh_operator_exports_the_status_totals_as_counters(metrics: PipelineMetrics) -> None:
    metrics.observe_health("shop", "orders", _health(restarts=4, batches=120, failures=7))
    assert _value(metrics, "eo_pipeline_restarts_total", **ORDERS) == 4
    assert _value(metrics, "eo_pipeline_batches_total", **ORDERS) == 120
    assert _value(metrics, "eo_pipeline_batch_failures_total", **ORDERS) == 7


def test_counters_grow_by_the_delta_and_never_shrink_when_a_total_is_recomputed(
    metrics: PipelineMetrics,
) -> None:
    seen = []
    for restarts in (2, 5, 3, 4, 4):
        metrics.observe_health("shop", "orders", _health(restarts=restarts))
        seen.append(_value(metrics, "eo_pipeline_restarts_total", **ORDERS))
    # 5 -> 3 is a shrinking status window: nothing is added, and 3 -> 4 is one more restart.
    assert seen == [2, 5, 5, 6, 6]


def test_histograms_observe_only_the_durations_handed_in(metrics: PipelineMetrics) -> None:
    metrics.observe_health("shop", "orders", _health(checkpoint_durations=(0.3, 400.0)))
    metrics.observe_health("shop", "orders", _health(commit_durations=(0.02,)))
    name = "eo_pipeline_checkpoint_duration_seconds"
    assert _value(metrics, f"{name}_count", **ORDERS) == 2
    assert _value(metrics, f"{name}_bucket", **ORDERS, le="0.5") == 1
    assert _value(metrics, f"{name}_bucket", **ORDERS, le="300.0") == 1
    assert _value(metrics, f"{name}_bucket", **ORDERS, le="600.0") == 2
    assert _value(metrics, "eo_pipeline_commit_duration_seconds_count", **ORDERS) == 1


def test_seconds_since_last_commit_is_computed_when_scraped(
    metrics: PipelineMetrics, clock: Clock
) -> None:
    metrics.observe_health("shop", "orders", _health(last_commit_time=1_000.0))
    assert _value(metrics, "eo_pipeline_seconds_since_last_commit", **ORDERS) == 60
    clock.now = 1_400.0
    assert _value(metrics, "eo_pipeline_seconds_since_last_commit", **ORDERS) == 400
    assert _value(metrics, "eo_pipeline_last_commit_timestamp_seconds", **ORDERS) == 1_000


def test_a_pipeline_that_never_committed_has_no_commit_time_series(
    metrics: PipelineMetrics,
) -> None:
    metrics.observe_health("shop", "orders", _health(last_commit_time=None, last_batch_id=None))
    assert _value(metrics, "eo_pipeline_seconds_since_last_commit", **ORDERS) is None
    assert _value(metrics, "eo_pipeline_last_commit_timestamp_seconds", **ORDERS) is None
    assert _value(metrics, "eo_pipeline_last_batch_id", **ORDERS) is None


def test_alert_thresholds_are_exported_per_pipeline_with_defaults(
    metrics: PipelineMetrics,
) -> None:
    metrics.observe_health("shop", "orders", _health())
    metrics.observe_health("shop", "slow", _health(max_checkpoint_duration_seconds=1800.0))
    assert _value(metrics, "eo_pipeline_alert_max_checkpoint_duration_seconds", **ORDERS) == 300
    assert _value(metrics, "eo_pipeline_alert_max_failure_rate_ratio", **ORDERS) == 0.05
    slow = {"namespace": "shop", "pipeline": "slow"}
    assert _value(metrics, "eo_pipeline_alert_max_checkpoint_duration_seconds", **slow) == 1800


def test_event_counters_start_at_zero_when_a_pipeline_is_first_seen(
    metrics: PipelineMetrics,
) -> None:
    metrics.observe_health("shop", "orders", _health())
    assert _value(metrics, "eo_pipeline_fenced_attempts_total", **ORDERS) == 0
    assert _value(metrics, "eo_pipeline_start_timeouts_total", **ORDERS) == 0
    assert _value(metrics, "eo_pipeline_recoveries_total", **ORDERS) == 0
    for outcome in ("committed", "rolled_back"):
        resolutions = "eo_pipeline_in_doubt_resolutions_total"
        assert _value(metrics, resolutions, **ORDERS, outcome=outcome) == 0


def test_resolutions_fencing_and_recoveries_are_counted(metrics: PipelineMetrics) -> None:
    metrics.record_resolution("shop", "orders", committed=3, rolled_back=2)
    metrics.record_resolution("shop", "orders", committed=1, rolled_back=0)
    metrics.record_fenced("shop", "orders")
    metrics.record_recovery("shop", "orders", 12.5)
    resolutions = "eo_pipeline_in_doubt_resolutions_total"
    assert _value(metrics, resolutions, **ORDERS, outcome="committed") == 4
    assert _value(metrics, resolutions, **ORDERS, outcome="rolled_back") == 2
    assert _value(metrics, "eo_pipeline_fenced_attempts_total", **ORDERS) == 1
    assert _value(metrics, "eo_pipeline_recoveries_total", **ORDERS) == 1
    assert _value(metrics, "eo_pipeline_recovery_duration_seconds_sum", **ORDERS) == 12.5


def test_a_start_timeout_is_counted_once_per_driver_pod(metrics: PipelineMetrics) -> None:
    metrics.record_start_timeout("shop", "orders", "orders-driver-e1")
    metrics.record_start_timeout("shop", "orders", "orders-driver-e1")
    metrics.record_start_timeout("shop", "orders", "orders-driver-e2")
    assert _value(metrics, "eo_pipeline_start_timeouts_total", **ORDERS) == 2


def test_a_negative_resolution_count_is_refused(metrics: PipelineMetrics) -> None:
    with pytest.raises(ValueError, match="resolution counts must be >= 0"):
        metrics.record_resolution("shop", "orders", committed=-1, rolled_back=0)


def test_forget_removes_every_series_of_the_pipeline_and_only_those(
    metrics: PipelineMetrics,
) -> None:
    metrics.observe_health("shop", "orders", _health(checkpoint_durations=(1.0,)))
    metrics.observe_health("shop", "refunds", _health())
    metrics.record_resolution("shop", "orders", committed=1, rolled_back=1)
    metrics.record_recovery("shop", "orders", 3.0)
    assert _series_of(metrics, "orders")
    before = _series_of(metrics, "refunds")

    metrics.forget("shop", "orders")

    assert _series_of(metrics, "orders") == []
    assert _series_of(metrics, "refunds") == before


def test_a_forgotten_pipeline_seen_again_starts_from_its_status_totals(
    metrics: PipelineMetrics,
) -> None:
    metrics.observe_health("shop", "orders", _health(restarts=5))
    metrics.forget("shop", "orders")
    metrics.observe_health("shop", "orders", _health(restarts=1))
    assert _value(metrics, "eo_pipeline_restarts_total", **ORDERS) == 1


def test_a_sink_removed_from_the_spec_loses_its_series(metrics: PipelineMetrics) -> None:
    two = {"warehouse": SinkHealth(5, 64, "wh:5432"), "archive": SinkHealth(1, 10, "ar:5432")}
    metrics.observe_health("shop", "orders", _health(sinks=two))
    metrics.observe_health(
        "shop", "orders", _health(sinks={"warehouse": SinkHealth(6, 64, "wh:5432")})
    )
    archive = {**ORDERS, "sink": "archive", "database": "ar:5432"}
    assert _value(metrics, "eo_sink_prepared_transactions", **archive) is None
    assert _value(metrics, "eo_sink_max_prepared_transactions", **archive) is None
    warehouse = {**ORDERS, "sink": "warehouse", "database": "wh:5432"}
    assert _value(metrics, "eo_sink_prepared_transactions", **warehouse) == 6
    assert _value(metrics, "eo_sink_max_prepared_transactions", **warehouse) == 64


def test_a_changed_guarantee_leaves_a_single_info_series(metrics: PipelineMetrics) -> None:
    metrics.observe_health("shop", "orders", _health(guarantee="at-least-once"))
    metrics.observe_health("shop", "orders", _health(guarantee="exactly-once"))
    info = [name for name in _series_of(metrics, "orders") if name == "eo_pipeline_info"]
    assert info == ["eo_pipeline_info"]
    assert _value(metrics, "eo_pipeline_info", **ORDERS, guarantee="exactly-once") == 1


def test_no_in_doubt_transaction_means_an_oldest_age_of_zero(metrics: PipelineMetrics) -> None:
    metrics.observe_health("shop", "orders", _health(in_doubt=0, in_doubt_oldest_age_seconds=99))
    assert _value(metrics, "eo_pipeline_in_doubt_oldest_age_seconds", **ORDERS) == 0


def test_a_failing_handler_counts_an_error_and_still_raises(metrics: PipelineMetrics) -> None:
    with metrics.reconcile_timer("timer"):
        pass
    with pytest.raises(RuntimeError, match="boom"), metrics.reconcile_timer("timer"):
        raise RuntimeError("boom")
    timer = {"handler": "timer"}
    assert _value(metrics, "eo_operator_reconcile_duration_seconds_count", **timer) == 2
    assert _value(metrics, "eo_operator_reconcile_errors_total", **timer) == 1
    assert _value(metrics, "eo_operator_reconcile_errors_total", handler="delete") == 0


def test_an_unknown_handler_name_is_refused(metrics: PipelineMetrics) -> None:
    with pytest.raises(ValueError, match="handler 'resync' is not one of"):
        metrics.reconcile_timer("resync").__enter__()  # type: ignore[arg-type]


def test_health_with_an_unknown_phase_or_an_out_of_range_ratio_is_refused() -> None:
    with pytest.raises(ValueError, match="phase 'Crashed' is not one of Pending"):
        _health(phase="Crashed")
    with pytest.raises(ValueError, match=r"failure_rate is a ratio in \[0, 1\], got 5.0"):
        _health(failure_rate=5.0)
    with pytest.raises(ValueError, match="restarts must be >= 0"):
        _health(restarts=-1)


def test_metrics_live_on_their_own_registry_not_the_global_one() -> None:
    PipelineMetrics(CollectorRegistry()).observe_health("shop", "orders", _health())
    PipelineMetrics(CollectorRegistry()).observe_health("shop", "orders", _health())
    assert REGISTRY.get_sample_value("eo_pipeline_epoch", ORDERS) is None


def test_serve_exposes_the_metrics_over_http(metrics: PipelineMetrics) -> None:
    metrics.observe_health("shop", "orders", _health())
    server = metrics.serve(0, addr="127.0.0.1")
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            body = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert 'eo_pipeline_epoch{namespace="shop",pipeline="orders"} 3.0' in body


def test_a_pass_stamps_when_it_observed_the_pipeline_and_forget_drops_it(
    metrics: PipelineMetrics, clock: Clock
) -> None:
    metrics.observe_pass("shop", "orders", PipelinePass("Suspended", False, 0, 1, None))
    assert _value(metrics, "eo_pipeline_last_observed_timestamp_seconds", **ORDERS) == clock.now
    metrics.forget("shop", "orders")
    assert _value(metrics, "eo_pipeline_last_observed_timestamp_seconds", **ORDERS) is None


def test_api_requests_are_counted_by_method(metrics: PipelineMetrics) -> None:
    metrics.count_api_request("GET")
    metrics.count_api_request("GET")
    metrics.count_api_request("PATCH")
    assert _value(metrics, "eo_operator_api_requests_total", method="GET") == 2
    assert _value(metrics, "eo_operator_api_requests_total", method="PATCH") == 1
