"""Prometheus metrics of one driver: what each batch cost and what it wrote, as it happens.

The operator republishes per-pipeline health from status (and keeps doing so while the driver
is dead); these metrics add the per-batch detail only the driver sees, such as rows per sink.
They carry the ``pipeline`` label; ``namespace`` comes from the scrape (pod metadata), since a
driver need not know where it runs. No pyspark here: the foreachBatch glue calls this API.
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable, Mapping
from typing import Final
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
)

log = logging.getLogger("eo.metrics")

BATCH_BUCKETS: Final = (
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0,
)  # fmt: skip
"""The operator's checkpoint-duration buckets, so both histograms compare bucket for bucket."""
COMMIT_BUCKETS: Final = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
)  # fmt: skip


class DriverMetrics:
    """The driver's metrics for one pipeline, on their own registry unless one is given."""

    def __init__(
        self,
        pipeline: str,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.pipeline = pipeline
        self._clock = clock
        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        self._batch_duration = Histogram(
            "eo_driver_batch_duration_seconds",
            "Whole batch duration: prepare + decide + commit.",
            ("pipeline",),
            buckets=BATCH_BUCKETS,
            registry=reg,
        ).labels(pipeline)
        self._commit_duration = Histogram(
            "eo_driver_commit_duration_seconds",
            "Phase 2 duration (COMMIT PREPARED of every participant).",
            ("pipeline",),
            buckets=COMMIT_BUCKETS,
            registry=reg,
        ).labels(pipeline)
        self._rows = Counter(
            "eo_driver_rows_committed",
            "Rows made visible, per sink.",
            ("pipeline", "sink"),
            registry=reg,
        )
        self._decided = Counter(
            "eo_driver_batches_decided",
            "Batches this driver decided.",
            ("pipeline",),
            registry=reg,
        ).labels(pipeline)
        self._failed = Counter(
            "eo_driver_failed_attempts",
            "Batch attempts that raised.",
            ("pipeline",),
            registry=reg,
        ).labels(pipeline)
        self._fenced = Counter(
            "eo_driver_fenced_attempts",
            "Decisions refused because a newer epoch fenced this driver.",
            ("pipeline",),
            registry=reg,
        ).labels(pipeline)
        self._epoch = Gauge(
            "eo_driver_epoch",
            "Fencing epoch this driver was started with.",
            ("pipeline",),
            registry=reg,
        ).labels(pipeline)
        self._last_batch_id = Gauge(
            "eo_driver_last_batch_id",
            "Last batch this driver decided.",
            ("pipeline",),
            registry=reg,
        ).labels(pipeline)

        self._last_trigger = Gauge(
            "eo_driver_last_trigger_timestamp_seconds",
            "Unix time of the last trigger that ran, with or without new input (heartbeat).",
            ("pipeline",),
            registry=reg,
        ).labels(pipeline)
        self._offsets_behind = Gauge(
            "eo_driver_source_offsets_behind_latest",
            "Input waiting at the last trigger: the sources' maxOffsetsBehindLatest, summed.",
            ("pipeline",),
            registry=reg,
        ).labels(pipeline)

    def set_epoch(self, epoch: int) -> None:
        """Record the epoch the driver was started with (it never changes afterwards)."""
        self._epoch.set(epoch)

    def batch(
        self,
        batch_id: int,
        duration: float,
        commit_duration: float,
        rows_by_sink: Mapping[str, int],
    ) -> None:
        """Record one batch this driver decided; call it once per decision, not for replays."""
        if any(rows < 0 for rows in rows_by_sink.values()):
            raise ValueError(f"row counts must be >= 0, got {dict(rows_by_sink)}")
        self._batch_duration.observe(duration)
        self._commit_duration.observe(commit_duration)
        for sink, rows in rows_by_sink.items():
            self._rows.labels(self.pipeline, sink).inc(rows)
        self._decided.inc()
        self._last_batch_id.set(batch_id)

    def failed(self) -> None:
        """Count a batch attempt that raised (Spark will retry it)."""
        self._failed.inc()

    def fenced(self) -> None:
        """Count a decision refused by the fence: this driver is a zombie and will exit."""
        self._fenced.inc()

    def trigger(self, offsets_behind_latest: float | None = None) -> None:
        """Record that a trigger ran (a batch finished, or Spark found no new input).

        This is the heartbeat that tells an idle pipeline from a stuck one: Spark runs no batch
        when a source has no new data, so the decision log alone cannot tell the two apart.
        ``offsets_behind_latest`` is the input the sources reported as waiting, when they
        report it (Kafka does; a file source does not, and the gauge keeps its last value).
        """
        self._last_trigger.set(self._clock())
        if offsets_behind_latest is not None:
            if offsets_behind_latest < 0:
                raise ValueError(f"offsets behind latest must be >= 0, got {offsets_behind_latest}")
            self._offsets_behind.set(offsets_behind_latest)

    def exposition(self) -> bytes:
        """The registry in Prometheus text format, as a scrape would see it."""
        return generate_latest(self.registry)

    def serve(self, port: int, addr: str = "0.0.0.0") -> WSGIServer:  # noqa: S104
        """Serve /metrics on a daemon thread; port 0 picks a free port (see server_port).

        A busy port is no reason to stop a driver that already holds its epoch: two drivers on
        one host (two pipelines, or a new epoch beside a paused old one) would otherwise end in
        an ``Address already in use`` traceback after fencing. The driver then serves on a free
        port instead and says so in one line; ``eo run --metrics-port 0`` turns metrics off.
        """
        try:
            server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        except OSError as exc:
            if port == 0:
                raise
            server, _thread = start_http_server(0, addr=addr, registry=self.registry)
            reason = "is in use (another driver on this host?)"
            if exc.errno != errno.EADDRINUSE:
                reason = f"cannot be bound ({exc.strerror})"
            log.warning(
                "metrics port %d %s; serving metrics on port %d instead "
                "(--metrics-port 0 turns them off)",
                port,
                reason,
                server.server_port,
            )
        return server
