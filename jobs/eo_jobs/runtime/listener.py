"""A StreamingQueryListener that logs Spark's own view of every micro-batch.

``foreachBatch`` logs the protocol timings (prepare / decide / commit); this listener adds
what only Spark knows: input rows, the trigger's phases and the query's state, one JSON line
per progress event, so a single ``kubectl logs`` shows both halves of a batch.

It is also the driver's heartbeat. Spark runs no micro-batch when a source has no new data, so
the decision log cannot tell an idle pipeline from a stuck one; Spark does tell the listener
about every trigger that ran (``onQueryProgress`` after a batch, ``onQueryIdle`` when there was
nothing to read), and each of them sets ``eo_driver_last_trigger_timestamp_seconds``. A batch
that hangs sends neither, so the heartbeat goes stale exactly when the pipeline is stuck.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, ClassVar

from pyspark import SparkContext
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

from eo_jobs import logs
from eo_jobs.runtime.metrics import DriverMetrics

log = logging.getLogger("eo.progress")

LAG_METRIC = "maxOffsetsBehindLatest"
"""What a Kafka source reports as input still waiting (per source, in offsets)."""


def offsets_behind_latest(sources: Any) -> float | None:
    """The input waiting behind the last trigger, summed over the sources that report it.

    None when no source reports it (file sources do not), so "unknown" never reads as "0".
    """
    total: float | None = None
    for source in sources or ():
        value = (getattr(source, "metrics", None) or {}).get(LAG_METRIC)
        if value is None:
            continue
        try:
            behind = max(0.0, float(value))
        except (TypeError, ValueError):
            continue
        total = behind if total is None else total + behind
    return total


class ProgressAsJson:
    """Spark's listener interface (py4j), handing a batch's progress over as one JSON text.

    PySpark's own bridge rebuilds the progress from the JVM object field by field, one py4j
    round trip each (maps, sources, sink, metrics): ~0.45 s of JVM and GIL time per batch on
    2 cores (py-spy), spent while the next batch runs. ``progress().json()`` is one call.
    """

    def __init__(self, listener: StreamingQueryListener) -> None:
        self.listener = listener

    def onQueryStarted(self, jevent: Any) -> None:  # noqa: N802 (Spark's names)
        """Once per query: PySpark's conversion is cheap here."""
        self.listener.onQueryStarted(QueryStartedEvent.fromJObject(jevent))

    def onQueryProgress(self, jevent: Any) -> None:  # noqa: N802
        """The progress of one batch, parsed from its JSON."""
        progress = json.loads(jevent.progress().json())
        self.listener.onQueryProgress(QueryProgressEvent.fromJson({"progress": progress}))

    def onQueryIdle(self, jevent: Any) -> None:  # noqa: N802
        """An idle trigger (three fields)."""
        self.listener.onQueryIdle(QueryIdleEvent.fromJObject(jevent))

    def onQueryTerminated(self, jevent: Any) -> None:  # noqa: N802
        """Once per query."""
        self.listener.onQueryTerminated(QueryTerminatedEvent.fromJObject(jevent))

    class Java:
        """The JVM interface this object implements (py4j)."""

        implements: ClassVar[list[str]] = [
            "org.apache.spark.sql.streaming.PythonStreamingQueryListener"
        ]


class ProgressListener(StreamingQueryListener):
    """One log line per batch and per query start/termination."""

    def __init__(
        self, metrics: DriverMetrics | None = None, on_idle: Callable[[], None] | None = None
    ) -> None:
        # The pipeline, namespace and epoch come with every event from the log context.
        self.metrics = metrics
        self.on_idle = on_idle
        """Called at every idle trigger (``runtime.stragglers``); it must return at once."""
        self._bridge: Any = None

    @property
    def _jlistener(self) -> Any:
        """What ``spark.streams.addListener`` registers: the JSON bridge, not PySpark's."""
        if self._bridge is None:
            jvm = SparkContext._jvm
            assert jvm is not None, "a SparkContext runs before listeners are added"
            self._bridge = jvm.PythonStreamingQueryListenerWrapper(ProgressAsJson(self))
        return self._bridge

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        """Log the query id (it ties the checkpoint to the decision log)."""
        logs.event("query-started", query_id=str(event.id), run_id=str(event.runId))

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        """Spark's progress of one micro-batch; also a heartbeat (a trigger ran)."""
        p = event.progress
        if self.metrics is not None:
            self.metrics.trigger(offsets_behind_latest(p.sources))
        logs.event("progress", batch=p.batchId, input_rows=p.numInputRows, duration_ms=p.durationMs)

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        """A trigger ran and found no new input: the pipeline is idle, not stuck."""
        if self.metrics is not None:
            self.metrics.trigger()
        if self.on_idle is not None:
            self.on_idle()

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        """Log how the query ended."""
        logs.event("query-terminated", exception=event.exception)
