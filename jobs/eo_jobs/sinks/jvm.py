"""A sink kind's part of eo's JVM writer (``runtime.jvm_writer``, the Maven module jvm/writer).

The JVM writer's tasks write a sink's batch straight from Spark's internal rows, with the same
transaction as the kind's Python writer task. What differs per database (where to connect, the
SQL the tasks run, the JDBC driver they need) is the kind's: ``SinkKind.jvm_sink`` gives a
``JvmSink`` for a writer, or says why that writer stays on the Python path. The runtime adds
what no database owns (the batch, the gid prefix, the fault, the dead-letter columns).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from eo_jobs.sinks.table_writer import TaskWrite


class JvmSink(Protocol):
    """One sink's part of the JVM writer's spec (``dev.eo.writer.Spec``)."""

    @property
    def kind(self) -> str:
        """``Spec.kind``: which package's tasks write the batch (``postgresql``, ``mysql``)."""

    @property
    def driver_class(self) -> str:
        """The JDBC driver class the tasks need on Spark's class path."""

    def sink_spec(self) -> dict[str, Any]:
        """What every batch's spec of the sink holds alike (JSON values)."""
        ...

    def batch_spec(self, task: TaskWrite, columns: Sequence[str]) -> dict[str, Any]:
        """The kind's part of one batch's spec: ``columns`` are the frame's, in order."""
        ...
