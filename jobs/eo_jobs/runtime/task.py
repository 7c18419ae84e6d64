"""What every writer task does: one transaction per task, named by a unique attempt.

The gid is (pipeline, query, sink, epoch, batch, partition, attempt) where ``attempt`` is
Spark's ``taskAttemptId()``: unique for the life of the SparkContext. ``attemptNumber()``
restarts at 0 in a stage retry, so a re-run task would reuse the gid of a task of the old stage
attempt that may still be prepared (its marker insert then waits on the old one's lock); a
unique id cannot collide. The transaction is prepared under the gid in exactly-once mode and
committed otherwise. The first sink's tasks also write the batch's dead letters (same database,
same transaction); other sinks' tasks drop them. Every sink's tasks write the records its own
table refuses as dead letters in their own transaction. How a transaction is written is the
sink database kind's (``sinks.kinds``: COPY for PostgreSQL, an XA branch for MySQL).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext

from eo_jobs.protocol.faults import crash_point
from eo_jobs.protocol.gid import Gid
from eo_jobs.sinks.kinds import kind_of
from eo_jobs.sinks.postgres.kept import KEPT_MEMORY_BYTES
from eo_jobs.sinks.table_writer import TableWriter


@dataclass(frozen=True)
class WriterTask:
    """Picklable description of one sink's writer tasks for one batch."""

    writer: TableWriter
    pipeline: str
    query_id: str
    sink: str
    epoch: int
    batch_id: int
    two_phase: bool
    driver_pid: int
    dead_letters: TableWriter | None = None
    refused_table: str | None = None
    """The dead-letter table (in this sink's database) that records the table refuses go to;
    None: such a record fails the task, naming the batch (``onRefusedRecord: fail``)."""
    kept_memory_bytes: int = KEPT_MEMORY_BYTES
    """How much of a task's rows either writer keeps in memory for refused records; the rest
    spills to a temporary file (``sinks.postgres.kept``)."""

    def refused_letters(self) -> TableWriter | None:
        """The writer of this sink's refused records, None when they fail the task."""
        if self.refused_table is None:
            return None
        return kind_of(self.writer.dsn).dead_letter_writer(self.writer.dsn, self.refused_table)

    def gid(self, partition: int, attempt_id: int) -> str:
        """The gid of the attempt ``attempt_id`` of writer task ``partition``."""
        return str(
            Gid.build(
                pipeline=self.pipeline,
                query_id=self.query_id,
                sink=self.sink,
                epoch=self.epoch,
                batch=self.batch_id,
                task=partition,
                attempt=attempt_id,
            )
        )

    def run(self, batches: Iterable[Any]) -> tuple[str, str, int, int]:
        """Write this task's Arrow record batches; ``(sink, gid, rows, dead letters)``."""
        context = TaskContext.get()
        if context is None:
            raise RuntimeError("a writer task runs inside a Spark task")
        partition = context.partitionId()
        gid = self.gid(partition, context.taskAttemptId())
        count, dead_count = kind_of(self.writer.dsn).run_task(self, batches, gid)
        if partition == 0:
            crash_point(
                "after-some-prepared",
                self.batch_id,
                pid=self.driver_pid,
                first_attempt=context.attemptNumber() == 0,
            )
        return (self.sink, gid, count, dead_count)
