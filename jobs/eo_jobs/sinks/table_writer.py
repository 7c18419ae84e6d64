"""What the driver needs of any sink database's table writer (the kinds in ``sinks.kinds``).

A writer is a small frozen dataclass shipped to Spark executors as is: where (``dsn``,
``table``), what (``columns``), and ``write`` for rows the driver holds itself (the dead letters
of a batch whose records had to be isolated). Writer tasks go through their kind's
``SinkKind.run_task``, which knows the fast path of its database.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol


class TableWriter(Protocol):
    """A picklable, hashable description of one table write."""

    @property
    def dsn(self) -> str:
        """The database, as the sink's credential gives it."""

    @property
    def table(self) -> str:
        """``schema.table`` (PostgreSQL) or ``database.table`` (MySQL)."""

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns written, in the rows' order."""

    def write(
        self, rows: Iterable[Sequence[Any]], *, gid: str | None, pipeline: str, batch_id: int
    ) -> int:
        """Write ``rows`` in one transaction: prepared under ``gid``, or committed if None."""
        ...


class TaskWrite(Protocol):
    """What a sink kind's ``run_task`` reads of one writer task (``runtime.task.WriterTask``
    is one; declared here so that sinks never import the Spark runtime)."""

    @property
    def writer(self) -> TableWriter:
        """The sink's writer."""

    @property
    def pipeline(self) -> str:
        """The pipeline's key, written in markers and dead letters."""

    @property
    def batch_id(self) -> int:
        """The micro-batch."""

    @property
    def two_phase(self) -> bool:
        """Prepare (exactly-once) or commit."""

    @property
    def dead_letters(self) -> TableWriter | None:
        """The writer of the batch's dead letters when this task writes them."""

    @property
    def kept_memory_bytes(self) -> int:
        """Memory for rows kept to isolate refused records."""

    def refused_letters(self) -> TableWriter | None:
        """The writer of records the table refuses; None: they fail the task."""
        ...

    def gid(self, partition: int, attempt_id: int) -> str:
        """The gid of the attempt ``attempt_id`` of writer task ``partition``."""
        ...
