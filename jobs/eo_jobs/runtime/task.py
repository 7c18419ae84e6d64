"""What every writer task does, whatever feeds it rows (pickled rows or Arrow batches).

One transaction per task, named by (pipeline, query, sink, epoch, batch, partition, attempt):
prepared under that gid in exactly-once mode, committed otherwise. The row writer (``batch``)
and the Arrow writer (``arrow_writer``) only differ in how rows reach Python.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext

from eo_jobs.protocol.faults import crash_point
from eo_jobs.protocol.gid import Gid
from eo_jobs.sinks.postgres.writer import PostgresWriter


@dataclass(frozen=True)
class WriterTask:
    """Picklable description of one sink's writer tasks for one batch."""

    writer: PostgresWriter
    pipeline: str
    query_id: str
    sink: str
    epoch: int
    batch_id: int
    two_phase: bool
    driver_pid: int

    def run(self, rows: Iterable[Sequence[Any]], default_task: int = 0) -> tuple[str, str, int]:
        """Write this task's rows; ``(sink, gid, count)`` for the driver's decision."""
        context = TaskContext.get()
        task = context.partitionId() if context else default_task
        attempt = context.attemptNumber() if context else 0
        gid = str(
            Gid.build(
                pipeline=self.pipeline,
                query_id=self.query_id,
                sink=self.sink,
                epoch=self.epoch,
                batch=self.batch_id,
                task=task,
                attempt=attempt,
            )
        )
        count = self.writer.write(
            rows,
            gid=gid if self.two_phase else None,
            pipeline=self.pipeline,
            batch_id=self.batch_id,
        )
        if task == 0:
            crash_point("after-some-prepared", self.batch_id, pid=self.driver_pid)
        return (self.sink, gid, count)
