"""A StreamingQueryListener that logs Spark's own view of every micro-batch.

``foreachBatch`` logs the protocol timings (prepare / decide / commit); this listener adds
what only Spark knows: input rows, the trigger's phases and the query's state, one JSON line
per progress event, so a single ``kubectl logs`` shows both halves of a batch.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

log = logging.getLogger("eo.progress")


class ProgressListener(StreamingQueryListener):
    """One log line per batch and per query start/termination."""

    def __init__(self, pipeline: str) -> None:
        self.pipeline = pipeline

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        """Log the query id (it ties the checkpoint to the decision log)."""
        print(
            json.dumps(
                {
                    "event": "query-started",
                    "pipeline": self.pipeline,
                    "query_id": str(event.id),
                    "run_id": str(event.runId),
                }
            ),
            flush=True,
        )

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        """Spark's progress of one micro-batch."""
        p = event.progress
        print(
            json.dumps(
                {
                    "event": "progress",
                    "batch": p.batchId,
                    "input_rows": p.numInputRows,
                    "duration_ms": p.durationMs,
                }
            ),
            flush=True,
        )

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        """Nothing to do when idle."""

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        """Log how the query ended."""
        print(
            json.dumps(
                {
                    "event": "query-terminated",
                    "pipeline": self.pipeline,
                    "exception": event.exception,
                }
            ),
            flush=True,
        )
