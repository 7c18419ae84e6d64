"""The MySQL/MariaDB sink kind (``sinks.kinds.SinkKind``): one XA branch per writer task.

Dead letters of a MySQL sink go to a table in the sink's own database, written inside the same
XA branch as the sink's rows: they commit or roll back with the batch, and no second database
is needed in the branch (XA across two connections of one task would be two participants for
one task's records). The table is eo's: created on first use, utf8mb4, InnoDB.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pymysql

from eo_jobs.protocol.mysql_xa import MySqlDsn, connect
from eo_jobs.sinks.mysql.arrow_rows import python_rows
from eo_jobs.sinks.mysql.contract import check_contract
from eo_jobs.sinks.mysql.writer import Connection, MySqlWriter, table_identifier
from eo_jobs.sinks.postgres.arrow_copy import DeadLetters, split_dead_letters
from eo_jobs.sinks.postgres.refusals import DEAD_LETTER_COLUMNS

if TYPE_CHECKING:
    from eo_jobs.sinks.table_writer import TaskWrite
    from eo_jobs.spec.models import TableSink

DEAD_LETTER_DDL = (
    "CREATE TABLE IF NOT EXISTS {} (pipeline VARCHAR(512) NOT NULL, batch_id BIGINT NOT NULL, "
    "raw LONGTEXT, reason TEXT NOT NULL, "
    "recorded_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) "
    "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
)
"""The dead-letter table, made by eo when it does not exist (the PostgreSQL one's columns)."""


@dataclass(frozen=True)
class LetterInsert:
    """Writes collected dead letters on a writer's connection, inside its open branch."""

    letters: DeadLetters[MySqlWriter]

    def __call__(self, conn: Connection) -> None:
        if self.letters.rows:
            writer = self.letters.writer
            with conn.cursor() as cur:
                cur.executemany(writer.insert_sql, self.letters.rows)


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
            with conn.cursor() as cur:
                cur.execute(DEAD_LETTER_DDL.format(table_identifier(table)))
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
        """One writer task's XA branch from Arrow batches: ``(rows, dead letters)``; the
        batch's dead letters (first sink) go into the same branch."""
        writer = task.writer
        assert isinstance(writer, MySqlWriter)
        dead = None
        if task.dead_letters is not None:
            assert isinstance(task.dead_letters, MySqlWriter)
            dead = DeadLetters(task.dead_letters, task.pipeline, task.batch_id)
        rows = python_rows(split_dead_letters(batches, writer.columns, dead))
        conn = writer.connect()
        try:
            count = writer.write_on(
                conn,
                rows,
                gid=gid if task.two_phase else None,
                pipeline=task.pipeline,
                batch_id=task.batch_id,
                also=None if dead is None else LetterInsert(dead),
            )
        finally:
            conn.close()
        return count, 0 if dead is None else len(dead.rows)
