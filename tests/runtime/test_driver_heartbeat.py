"""The driver's heartbeat and its metrics port: an idle driver still says it is alive, and a
second driver on the same host does not die on a busy port.

The heartbeat test runs a real local Spark streaming query with the real listener: Spark itself
decides when a trigger counts as idle, which is exactly what the no-recent-commit alert relies on.
"""

from __future__ import annotations

import logging
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from eo_jobs.runtime.metrics import DriverMetrics

ORDERS = {"pipeline": "shop/orders"}


def _value(metrics: DriverMetrics, name: str) -> float | None:
    return metrics.registry.get_sample_value(name, ORDERS)


def test_a_busy_metrics_port_is_a_one_line_warning_and_metrics_move_to_a_free_port(
    caplog: pytest.LogCaptureFixture,
) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    busy = holder.getsockname()[1]
    metrics = DriverMetrics("shop/orders")
    metrics.set_epoch(3)
    try:
        with caplog.at_level(logging.WARNING, logger="eo.metrics"):
            server = metrics.serve(busy, addr="127.0.0.1")
        try:
            assert server.server_port != busy
            url = f"http://127.0.0.1:{server.server_port}/metrics"
            with urllib.request.urlopen(url, timeout=10) as response:
                assert 'eo_driver_epoch{pipeline="shop/orders"} 3.0' in response.read().decode()
        finally:
            server.shutdown()
            server.server_close()
    finally:
        holder.close()
    (record,) = [r for r in caplog.records if r.name == "eo.metrics"]
    message = record.getMessage()
    assert "\n" not in message
    assert f"metrics port {busy} is in use" in message
    assert f"on port {server.server_port} instead" in message
    assert "--metrics-port 0" in message


def test_a_trigger_sets_the_heartbeat_and_the_waiting_input() -> None:
    now = [1000.0]
    metrics = DriverMetrics("shop/orders", registry=CollectorRegistry(), clock=lambda: now[0])
    assert _value(metrics, "eo_driver_last_trigger_timestamp_seconds") == 0
    metrics.trigger(offsets_behind_latest=42)
    now[0] = 1010.0
    metrics.trigger()
    assert _value(metrics, "eo_driver_last_trigger_timestamp_seconds") == 1010.0
    assert _value(metrics, "eo_driver_source_offsets_behind_latest") == 42
    with pytest.raises(ValueError, match=">= 0"):
        metrics.trigger(offsets_behind_latest=-1)


def test_offsets_behind_latest_sums_the_sources_that_report_it_and_is_none_otherwise() -> None:
    pytest.importorskip("pyspark")
    from pyspark.sql.streaming.listener import SourceProgress

    from eo_jobs.runtime.listener import offsets_behind_latest

    def source(metrics: dict[str, str]) -> SourceProgress:
        return SourceProgress(
            description="kafka",
            startOffset="{}",
            endOffset="{}",
            latestOffset="{}",
            numInputRows=0,
            inputRowsPerSecond=0.0,
            processedRowsPerSecond=0.0,
            metrics=metrics,
        )

    assert offsets_behind_latest([]) is None
    assert offsets_behind_latest([source({})]) is None
    kafka = [source({"maxOffsetsBehindLatest": "7"}), source({"maxOffsetsBehindLatest": "5"})]
    assert offsets_behind_latest(kafka) == 12
    assert offsets_behind_latest([source({"maxOffsetsBehindLatest": "0"})]) == 0


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    pytest.importorskip("pyspark")
    from tests.support.spark import local_session

    # Spark reports an idle trigger at most this often (default 10 s).
    conf = {"spark.sql.streaming.noDataProgressEventInterval": "200ms"}
    with local_session("eo-heartbeat-test", conf) as session:
        yield session


def _noop_stream(spark: Any, tmp_path: Path, **trigger: Any) -> Any:
    """A stream of ``tmp_path/in``'s JSON lines into ``noop``, started with ``trigger``."""
    return (
        spark.readStream.schema("id INT")
        .json(str(tmp_path / "in"))
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(**trigger)
        .start()
    )


def test_an_idle_query_keeps_the_heartbeat_fresh_without_any_batch(
    spark: object, tmp_path: Path
) -> None:
    from pyspark.sql import SparkSession

    from eo_jobs.runtime.listener import ProgressListener

    assert isinstance(spark, SparkSession)
    folder = tmp_path / "in"
    folder.mkdir()
    metrics = DriverMetrics("shop/orders", registry=CollectorRegistry())
    listener = ProgressListener(metrics)
    spark.streams.addListener(listener)
    query = _noop_stream(spark, tmp_path, processingTime="200 milliseconds")
    try:
        started = time.time()
        deadline = time.monotonic() + 60
        beats: list[float] = []
        while time.monotonic() < deadline and len(set(beats)) < 3:
            beat = _value(metrics, "eo_driver_last_trigger_timestamp_seconds") or 0.0
            if beat >= started:
                beats.append(beat)
            time.sleep(0.2)
        assert len(set(beats)) >= 3, "no idle heartbeat within 60 s"
        assert query.lastProgress is None or query.lastProgress["numInputRows"] == 0
        assert sorted(beats) == beats
    finally:
        query.stop()
        spark.streams.removeListener(listener)


def test_a_batchs_progress_reaches_the_listener_whole_through_its_json(
    spark: object, tmp_path: Path
) -> None:
    from pyspark.sql import SparkSession

    from eo_jobs.runtime.listener import ProgressListener

    assert isinstance(spark, SparkSession)

    class Recording(ProgressListener):
        def __init__(self) -> None:
            super().__init__(DriverMetrics("shop/orders", registry=CollectorRegistry()))
            self.seen: list[Any] = []

        def onQueryProgress(self, event: Any) -> None:
            super().onQueryProgress(event)
            self.seen.append(event.progress)

    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.json").write_text('{"id": 1}\n{"id": 2}\n{"id": 3}\n')
    listener = Recording()
    spark.streams.addListener(listener)
    query = _noop_stream(spark, tmp_path, availableNow=True)
    try:
        query.awaitTermination(60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(p.numInputRows for p in listener.seen):
            time.sleep(0.1)
    finally:
        query.stop()
        spark.streams.removeListener(listener)
    # addListener registered the JSON bridge (PySpark asked the listener for its _jlistener).
    assert listener._bridge is not None
    progress = next(p for p in listener.seen if p.numInputRows)
    assert (progress.batchId, progress.numInputRows) == (0, 3)
    assert str(progress.id) == query.id and "addBatch" in progress.durationMs
    assert progress.sources[0].numInputRows == 3
    assert progress.sink.description
