"""Dead letters in a MySQL/MariaDB sink's database, written inside the writer's XA branch.

The PostgreSQL sink's dead-letter table (``sinks.postgres.refusals``) has the columns
``DEAD_LETTER_COLUMNS`` (pipeline, batch_id, raw, reason) plus ``recorded_at``; the MySQL one
has the same, so every dead letter keeps one shape whatever the sink:

* ``raw`` is the record as JSON, column name to value, characters outside ASCII escaped
  (``refusals.record_json``, shared with PostgreSQL): a record refused because its column's
  charset cannot hold a character (an emoji in a ``utf8mb3`` column) still fits;
* ``reason`` is ``<table> refused the record: MySQL error <n> (<NAME>), column <c>:
  <message>`` (``refusals.Refusal.reason``), or the reason the parse or the transform gave;
* ``recorded_at`` is ``DATETIME(6)`` in UTC (the writer's session ``time_zone`` is
  ``+00:00``), not ``TIMESTAMP``, which ends in 2038.

Why inside the branch: the dead letters of a batch then commit or roll back with its rows, so
they are exactly-once too (a replayed batch writes them again only if the first attempt's
branch was rolled back). They go after the rows and before the marker and ``XA END``.

Why the table is made *before* ``XA START``: DDL inside a branch is refused (``XAER_RMFAIL``,
docs/mysql.md), so ``ensure_dead_letter_table`` runs on the writer's connection while it is in
autocommit, before the branch starts, every time a writer has a dead-letter table (one look
at ``information_schema``, no lock on the table). ``CREATE TABLE IF NOT EXISTS`` lets two tasks
make it at the same moment. A user without ``CREATE`` needs it made beforehand, with
``DEAD_LETTER_DDL``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pymysql

from eo_jobs.sinks.mysql.identifiers import table_identifier
from eo_jobs.sinks.mysql.refusals import Refusal
from eo_jobs.sinks.postgres.refusals import DEAD_LETTER_COLUMNS, record_json

__all__ = ["DEAD_LETTER_COLUMNS", "DEAD_LETTER_DDL", "DeadLetters", "ensure_dead_letter_table"]

DEAD_LETTER_DDL = (
    "CREATE TABLE IF NOT EXISTS {} (pipeline VARCHAR(512) NOT NULL, batch_id BIGINT NOT NULL, "
    "raw LONGTEXT, reason MEDIUMTEXT NOT NULL, "
    "recorded_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
)
"""The dead-letter table, made by eo when it does not exist (``{}``: the quoted name)."""
INSERT_SQL = "INSERT INTO {} (pipeline, batch_id, raw, reason) VALUES (%s, %s, %s, %s)"
EXISTS_SQL = (
    "SELECT 1 FROM information_schema.TABLES "
    "WHERE TABLE_SCHEMA = COALESCE(NULLIF(%s, ''), DATABASE()) AND TABLE_NAME = %s"
)
"""Finds the dead-letter table; parameters: its database ('' for the connection's) and name."""


def table_parts(table: str) -> tuple[str, str]:
    """``(database, name)`` of ``name`` or ``database.name`` (database '' when not given)."""
    schema, dot, name = table.partition(".")
    return (schema, name) if dot else ("", table)


def ensure_dead_letter_table(conn: pymysql.Connection[Any], table: str) -> None:
    """Make ``table`` (``name`` or ``database.name``) if it does not exist.

    Runs before ``XA START`` on an autocommit connection (see the module); inside a
    branch or a transaction the server would refuse or implicitly commit the DDL.
    """
    with conn.cursor() as cur:
        cur.execute(EXISTS_SQL, table_parts(table))
        if cur.fetchone() is not None:
            return
        # The name is quoted part by part by table_identifier.
        cur.execute(DEAD_LETTER_DDL.format(table_identifier(table)))


@dataclass
class DeadLetters:
    """One branch's dead letters: rows of ``DEAD_LETTER_COLUMNS``, written by ``write_on``.

    The writer adds the rows its table refuses (``refused``); a caller may add the letters
    of the records its parse or transform refused (``add``) before the write, and read
    ``rows`` after it (how many dead letters the branch holds).
    """

    pipeline: str
    batch_id: int
    sink_table: str
    """The table whose refusals these are (named in each reason)."""
    columns: tuple[str, ...]
    """The names of a refused row's values (the keys of ``raw``)."""
    rows: list[tuple[str, int, str | None, str]] = field(default_factory=list)

    def add(self, raw: str | None, reason: str) -> None:
        """Keep one dead letter (raw text and reason as they are)."""
        self.rows.append((self.pipeline, self.batch_id, raw, reason))

    def refused(self, row: Sequence[Any], refusal: Refusal) -> None:
        """The ``RefusedRows`` callback: the refused row as a dead letter."""
        self.add(record_json(list(self.columns), list(row)), refusal.reason(self.sink_table))

    def write_on(self, conn: pymysql.Connection[Any], table: str) -> int:
        """Insert the letters into ``table`` on ``conn`` (inside the caller's branch); how many."""
        if not self.rows:
            return 0
        with conn.cursor() as cur:
            # The name is quoted part by part by table_identifier; values are parameters.
            cur.executemany(INSERT_SQL.format(table_identifier(table)), self.rows)
        return len(self.rows)
