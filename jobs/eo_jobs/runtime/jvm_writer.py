"""Writer tasks in the JVM: a sink's batch written from Spark's internal rows, no Python worker.

The Python writer (``arrow_writer``) hands each partition to a Python worker as Arrow record
batches. On 200,000-row batches that hand-over (Spark's Arrow conversion, the worker reading
the socket, the encoding) was most of what eo cost above Spark's own ``noop`` sink: a
PostgreSQL writer task that encodes the binary COPY form in the JVM, straight from Spark's
rows, wrote 723k rows/s where the same task in Python wrote 539k (bench/README.md,
2026-11-27). ``jvm/writer`` (``dev.eo.writer``) has such tasks per database kind, each with the
same transaction as the kind's Python task (``runtime.task``, ``SinkKind.run_task``):
PostgreSQL's by binary COPY and PREPARE TRANSACTION, MySQL's and MariaDB's by multi-row
INSERTs in an XA branch.

What differs per database is the sink kind's (``SinkKind.jvm_sink``, ``sinks.jvm.JvmSink``):
where to connect, the SQL, the JDBC driver. What no database owns is here: the batch, the gid
prefix, the armed fault, the dead-letter columns, and the result lines.

It is used for a sink when everything it needs holds, else the sink keeps the Python writer
and the driver says why (event ``writer``):

- its jar was built (``scripts/build-writer.sh``, run by ``./dev setup``; the job image has it);
- the kind's JDBC driver is on Spark's class path (the build puts it beside the jar);
- the kind takes the sink's writer (a PostgreSQL DSN pgJDBC reads alike: ``sinks.postgres.jvm``);
- per batch, every written column has a form the kind's tasks write: otherwise that batch goes
  through the Python writer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from py4j.java_gateway import JavaClass  # type: ignore[import-untyped]
from pyspark.sql import DataFrame, SparkSession

from eo_jobs import logs
from eo_jobs.protocol.faults import armed_action
from eo_jobs.runtime.packages import writer_jars
from eo_jobs.runtime.task import WriterTask
from eo_jobs.sinks.jvm import JvmSink
from eo_jobs.sinks.kinds import kind_of
from eo_jobs.sinks.postgres.arrow_copy import DL_RAW, DL_REASON
from eo_jobs.sinks.table_writer import TableWriter

ENTRY = "dev.eo.writer.PreparedCopy"
UNFIT = "unfit\t"
"""The first line of the writer's answer when the frame has a column it cannot carry."""
FORCE_ENV = "EO_WRITER"
"""``python`` keeps every sink on the Python writer (an A/B, or a way around a JVM writer bug)."""


def jvm_ready(spark: SparkSession) -> str | None:
    """None when the JVM writer can run in this session, else why not."""
    if os.environ.get(FORCE_ENV, "auto") == "python":
        return f"{FORCE_ENV}=python"
    jars = writer_jars()
    if isinstance(jars, str):
        return jars
    if not jvm_has_class(spark, ENTRY):
        return f"{ENTRY} is not on Spark's class path (spark.jars)"
    return None


def jvm_has_class(spark: SparkSession, name: str) -> bool:
    """Whether Spark's driver JVM loads class ``name`` (spark.jars included)."""
    found: Any = spark._jvm
    for part in name.split("."):
        found = getattr(found, part)
    return isinstance(found, JavaClass)


@dataclass
class JvmWriter:
    """One sink's writer tasks in the JVM, for every batch of a driver's query."""

    writer: TableWriter
    sink: JvmSink
    _refused: set[str] = field(default_factory=set, init=False)

    @classmethod
    def choose(
        cls,
        writer: TableWriter,
        jvm_ready: str | None,
        has_class: Callable[[str], bool] | None = None,
    ) -> JvmWriter | str:
        """The JVM writer for ``writer``'s sink, or why the sink keeps the Python writer.

        ``jvm_ready`` is None when the writer's jar is on Spark's class path, else why not;
        ``has_class`` says whether the driver JVM loads a class (None: not asked here, and the
        tasks' entry point still says a missing JDBC driver, as an unfit batch).
        """
        if jvm_ready is not None:
            return jvm_ready
        sink = kind_of(writer.dsn).jvm_sink(writer)
        if isinstance(sink, str):
            return sink
        if has_class is not None and not has_class(sink.driver_class):
            return (
                f"the {sink.kind} JDBC driver {sink.driver_class} is not on Spark's class path "
                "(scripts/build-writer.sh puts it beside eo-writer.jar)"
            )
        return cls(writer, sink)

    def run(
        self, frame: DataFrame, task: WriterTask, columns: list[str]
    ) -> list[tuple[str, str, int, int]] | None:
        """Write one batch's ``frame`` (columns ``columns``); None if a column does not fit.

        ``(sink, gid, rows, dead letters)`` per task, as ``ArrowWriteJob.run`` returns them.
        """
        spec = self._spec(task, columns)
        jvm: Any = frame.sparkSession._jvm
        lines = list(jvm.dev.eo.writer.PreparedCopy.run(frame._jdf, json.dumps(spec)))
        if len(lines) == 1 and lines[0].startswith(UNFIT):
            reason = lines[0][len(UNFIT) :]
            if reason not in self._refused:
                self._refused.add(reason)
                logs.event("writer", sink=task.sink, path="python", reason=reason)
            return None
        results = []
        for line in lines:
            gid, count, dead = line.split("\t")
            results.append((task.sink, gid, int(count), int(dead)))
        return results

    def _spec(self, task: WriterTask, columns: list[str]) -> dict[str, Any]:
        """The batch's spec: the sink kind's part (``sinks.jvm``) and what no kind owns."""
        gid = task.gid(0, 0)
        return {
            "kind": self.sink.kind,
            **self.sink.sink_spec(),
            **self.sink.batch_spec(task, columns),
            "columns": list(self.writer.columns),
            "reasonIndex": columns.index(DL_REASON) if DL_REASON in columns else -1,
            "rawIndex": columns.index(DL_RAW) if DL_RAW in columns else -1,
            "gidPrefix": gid[: -len("0:0")],
            "twoPhase": task.two_phase,
            "pipeline": task.pipeline,
            "batchId": task.batch_id,
            "fault": armed_action("after-some-prepared", task.batch_id),
            "driverPid": task.driver_pid,
            "keptMemoryBytes": task.kept_memory_bytes,
        }
