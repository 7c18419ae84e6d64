"""The MySQL/MariaDB sink kind (``sinks.kinds.SinkKind``): one XA branch per writer task.

Dead letters of a MySQL sink go to a table in the sink's own database, written inside the same
XA branch as the sink's rows: they commit or roll back with the batch, and no second database
is needed in the branch (XA across two connections of one task would be two participants for
one task's records). The table is eo's: created on first use, utf8mb4, InnoDB.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pymysql

from eo_jobs.protocol.mysql_xa import MySqlDsn, connect
from eo_jobs.sinks.mysql.contract import check_contract
from eo_jobs.sinks.mysql.dead_letters import DeadLetters, ensure_dead_letter_table
from eo_jobs.sinks.mysql.jvm import mysql_jvm_sink
from eo_jobs.sinks.mysql.refusals import Refusal, RefusedRows
from eo_jobs.sinks.mysql.writer import MySqlWriter
from eo_jobs.sinks.postgres.arrow_copy import DeadLetters as ArrowLetters
from eo_jobs.sinks.postgres.arrow_copy import split_dead_letters
from eo_jobs.sinks.postgres.refusals import DEAD_LETTER_COLUMNS, RefusedRecordError

if TYPE_CHECKING:
    from eo_jobs.sinks.jvm import JvmSink
    from eo_jobs.sinks.table_writer import TableWriter, TaskWrite
    from eo_jobs.spec.models import TableSink


def fail_refused(table: str, batch_id: int) -> RefusedRows:
    """``onRefusedRecord: fail``: a refused row fails the task, naming the batch and why."""

    def fail(_row: Sequence[Any], refusal: Refusal) -> None:
        raise RefusedRecordError(refusal.failure(table, batch_id))

    return fail


class MySqlKind:
    """MySQL and MariaDB sinks: multi-row INSERTs inside ``XA START ... XA PREPARE``."""

    name = "mysql"

    def ping(self, dsn: str) -> str:
        """Connect and disconnect (``mysql_xa.CONNECT_TIMEOUT``); the DSN's user."""
        target = MySqlDsn.parse(dsn)
        try:
            connect(target).close()
        except pymysql.OperationalError as exc:
            raise ConnectionError(str(exc).strip() or repr(exc)) from exc
        return target.user

    def writer(self, sink: TableSink, dsn: str, columns: tuple[str, ...]) -> MySqlWriter:
        """The sink's picklable writer of ``columns``."""
        return MySqlWriter(
            dsn=dsn,
            table=sink.table,
            columns=columns,
            mode=sink.mode,
            key_columns=tuple(sink.key_columns),
            version_column=sink.version_column,
        )

    def dead_letter_writer(self, dsn: str, table: str) -> MySqlWriter:
        """The writer of the dead-letter table ``table`` in ``dsn``'s database."""
        return MySqlWriter(dsn=dsn, table=table, columns=DEAD_LETTER_COLUMNS)

    def ensure_dead_letter_table(self, dsn: str, table: str) -> None:
        """Create the dead-letter table if missing (DDL: never inside an XA branch)."""
        conn = connect(dsn)
        try:
            ensure_dead_letter_table(conn, table)
        finally:
            conn.close()

    def contract_problems(
        self,
        sink: TableSink,
        dsn: str,
        written: Sequence[tuple[str, str]],
        *,
        two_phase: bool,
        dead_letter_table: str | None,
    ) -> list[str]:
        """``sinks.mysql.contract.check_contract`` on the sink's table."""
        conn = connect(dsn)
        try:
            return [
                str(p)
                for p in check_contract(
                    conn,
                    sink.table,
                    columns=[name for name, _ in written],
                    mode=sink.mode,
                    key_columns=sink.key_columns,
                    two_phase=two_phase,
                    version_column=sink.version_column,
                )
            ]
        finally:
            conn.close()

    def run_task(self, task: TaskWrite, batches: Iterable[Any], gid: str) -> tuple[int, int]:
        """One writer task's XA branch from Arrow batches: ``(rows, dead letters)``.

        The batches go to the writer as Arrow (``MySqlWriter.write_arrow_on``): an append's
        literals are built by Arrow's kernels, not one Python value at a time.

        The batch's own dead letters (records that did not parse or transform: the first
        sink's tasks) and the rows the table refuses (``onRefusedRecord: deadLetter``) go to
        the dead-letter table of the sink's database, inside the same branch.
        """
        writer = task.writer
        assert isinstance(writer, MySqlWriter)
        batch_dead = task.dead_letters
        refused_to = task.refused_letters()
        letters_at = next((w.table for w in (refused_to, batch_dead) if w is not None), None)
        collected = None
        if batch_dead is not None:
            collected = ArrowLetters(batch_dead, task.pipeline, task.batch_id)
        kept = split_dead_letters(batches, writer.columns, collected)
        letters = None
        if letters_at is not None:
            # One list for both: the Arrow split appends the batch's dead letters to it while
            # the writer reads the batches, the writer appends refused rows, then writes them all.
            shared = collected.rows if collected is not None else []
            letters = DeadLetters(
                task.pipeline, task.batch_id, writer.table, writer.columns, shared
            )
        fail = None if refused_to is not None else fail_refused(writer.table, task.batch_id)
        conn = writer.connect()
        try:
            count = replace(writer, dead_letter_table=letters_at).write_arrow_on(
                conn,
                kept,
                gid=gid if task.two_phase else None,
                pipeline=task.pipeline,
                batch_id=task.batch_id,
                refused=fail,
                dead_letters=letters,
            )
        finally:
            conn.close()
        return count, 0 if letters is None else len(letters.rows)

    def jvm_sink(self, writer: TableWriter) -> JvmSink | str:
        """The sink's part of eo's JVM writer (``sinks.mysql.jvm``)."""
        return mysql_jvm_sink(writer)
