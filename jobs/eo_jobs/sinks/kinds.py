"""What the driver does differently per sink database kind, behind one interface.

The driver asks ``kind_of(dsn)`` for a sink's writer, its dead-letter table, its contract check,
and how a writer task writes its transaction; the coordinator, recovery and the sweep reach
prepared transactions through ``protocol.participants.ParticipantStore`` the same way. A third
database is a module implementing ``SinkKind`` and one entry in ``KINDS``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from eo_jobs.protocol import databases
from eo_jobs.sinks.mysql.kind import MySqlKind
from eo_jobs.sinks.postgres.kind import PostgresKind

if TYPE_CHECKING:
    from eo_jobs.sinks.jvm import JvmSink
    from eo_jobs.sinks.table_writer import TableWriter, TaskWrite
    from eo_jobs.spec.models import TableSink


class SinkKind(Protocol):
    """One database kind's part of the driver."""

    name: str

    def ping(self, dsn: str) -> str:
        """Connect and disconnect; the user it logged in as. ``ValueError``: ``dsn`` is not
        a connection string; ``ConnectionError``: the database's reason it failed."""
        ...

    def writer(self, sink: TableSink, dsn: str, columns: tuple[str, ...]) -> TableWriter:
        """The sink's picklable writer of ``columns``."""
        ...

    def dead_letter_writer(self, dsn: str, table: str) -> TableWriter:
        """The writer of the dead-letter table ``table`` in ``dsn``'s database."""
        ...

    def ensure_dead_letter_table(self, dsn: str, table: str) -> None:
        """Create the dead-letter table in ``dsn``'s database if it is missing."""
        ...

    def contract_problems(
        self,
        sink: TableSink,
        dsn: str,
        written: Sequence[tuple[str, str]],
        *,
        two_phase: bool,
        dead_letter_table: str | None,
    ) -> list[str]:
        """Why the sink cannot honour the guarantee or hold the written columns (Spark types
        as ``written``); with ``dead_letter_table``, why its role cannot write that table."""
        ...

    def run_task(self, task: TaskWrite, batches: Iterable[Any], gid: str) -> tuple[int, int]:
        """One writer task's transaction from Arrow record batches: ``(rows, dead letters)``,
        prepared under ``gid`` when ``task.two_phase``, else committed."""
        ...

    def jvm_sink(self, writer: TableWriter) -> JvmSink | str:
        """The sink's part of eo's JVM writer (``sinks.jvm``), or why ``writer``'s tasks
        stay on the Python path."""
        ...


KINDS: dict[databases.Kind, SinkKind] = {
    "postgresql": PostgresKind(),
    "mysql": MySqlKind(),
}


def kind_of(dsn: str) -> SinkKind:
    """The sink kind of the database ``dsn`` names."""
    return KINDS[databases.kind(dsn)]
