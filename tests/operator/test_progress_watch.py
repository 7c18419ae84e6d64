"""The no-progress clock a hung-driver restart reads (``progress.Watch``), and its counter.

The clock counts only what this operator process saw of a driver pod: nothing before its
endpoint first answered, the driver's own heartbeat once it did, and silence after that."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from eo_operator.metrics import PipelineMetrics, PipelinePass
from eo_operator.progress import DriverProgress, Watch, watch

POD = "orders-driver-e1"


def test_nothing_is_watched_before_the_endpoint_answers() -> None:
    assert watch(None, POD, None, 1_000.0) is None


def test_after_an_operator_restart_the_first_answer_brings_the_driver_s_own_heartbeat() -> None:
    # The driver last triggered at 400; this process first hears it at 1,000: the clock runs
    # from 400 (not from 1,000, which would start it from zero).
    seen = watch(None, POD, DriverProgress(400.0, None), 1_000.0)
    assert seen == Watch(POD, 1_000.0, 400.0)
    assert seen.newest == 400.0


def test_before_its_first_trigger_a_driver_counts_from_its_first_answer() -> None:
    seen = watch(None, POD, DriverProgress(None, None), 1_000.0)
    assert seen is not None and seen.newest == 1_000.0
    later = watch(seen, POD, DriverProgress(None, None), 1_010.0)
    assert later is not None and later.newest == 1_000.0


def test_silence_keeps_the_last_heartbeat_so_the_clock_runs_on() -> None:
    seen = watch(None, POD, DriverProgress(990.0, None), 1_000.0)
    silent = watch(seen, POD, None, 1_600.0)
    assert silent == seen
    assert silent is not None and silent.newest == 990.0


def test_heartbeats_move_it_and_a_new_pod_starts_a_new_watch() -> None:
    seen = watch(None, POD, DriverProgress(990.0, None), 1_000.0)
    seen = watch(seen, POD, DriverProgress(1_005.0, None), 1_010.0)
    assert seen == Watch(POD, 1_000.0, 1_005.0)
    assert watch(seen, "orders-driver-e2", None, 1_020.0) is None
    fresh = watch(seen, "orders-driver-e2", DriverProgress(None, None), 1_030.0)
    assert fresh == Watch("orders-driver-e2", 1_030.0, None)


def _hung_total(metrics: PipelineMetrics) -> float | None:
    return metrics.registry.get_sample_value(
        "eo_pipeline_hung_restarts_total", {"namespace": "shop", "pipeline": "orders"}
    )


def test_a_hung_restart_is_counted_once_per_driver_pod_from_a_series_at_0() -> None:
    metrics = PipelineMetrics(CollectorRegistry())
    metrics.observe_pass("shop", "orders", PipelinePass("Running", True, 0, 1))
    assert _hung_total(metrics) == 0
    metrics.record_hung("shop", "orders", "orders-driver-e1")
    metrics.record_hung("shop", "orders", "orders-driver-e1")
    metrics.record_hung("shop", "orders", "orders-driver-e2")
    assert _hung_total(metrics) == 2
    metrics.forget("shop", "orders")
    assert _hung_total(metrics) is None
