"""One writer task's transaction against a PostgreSQL table.

Append uses COPY (an order of magnitude faster than row INSERTs). Upsert dedups the task's rows
by key in memory and then runs ``INSERT ... ON CONFLICT DO UPDATE``; the design brief suggested
COPY into a temporary staging table, but PostgreSQL refuses to PREPARE a transaction that
touched temporary objects, so that shape cannot be used for a prepared participant. Rows must
be hash-partitioned by key before they reach the writers, so two participants never lock the
same key.

Upsert ordering, one rule in memory and in SQL: the row with the highest ``versionColumn``
wins; a NULL version is older than any other (a stored NULL is replaced by any incoming row,
an incoming NULL never replaces a stored non-NULL); among equal versions the later row wins.
Without a version column the order is undefined (Spark's shuffle does not keep source order),
which is why ``eo validate`` warns about it.

Every transaction pins ``TimeZone`` to UTC: a value without an offset (a ``TIMESTAMP_NTZ``
wall time) must not depend on the server's or the role's default zone.

In exactly-once mode the transaction ends with a marker row and PREPARE TRANSACTION; in
at-least-once and idempotent modes it simply commits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from eo_jobs.protocol.xa import prepare, write_marker

LOCK_TIMEOUT_MS = 30_000
"""A writer blocked this long (e.g. on a zombie's prepared lock) fails instead of hanging."""


def table_identifier(table: str) -> sql.Identifier:
    """``schema.table`` as a quoted identifier (never spliced as text)."""
    schema, _, name = table.partition(".")
    return sql.Identifier(schema, name)


@dataclass(frozen=True)
class PostgresWriter:
    """Picklable description of a table write; ships to Spark executors as is."""

    dsn: str
    table: str
    columns: tuple[str, ...]
    mode: str = "append"
    key_columns: tuple[str, ...] = ()
    version_column: str | None = None
    lock_timeout_ms: int = LOCK_TIMEOUT_MS
    connect_timeout: int = 10

    def __post_init__(self) -> None:
        if self.mode not in ("append", "upsert"):
            raise ValueError(f"unknown mode {self.mode!r}")
        if self.mode == "upsert":
            missing = [k for k in self.key_columns if k not in self.columns]
            if not self.key_columns or missing:
                raise ValueError(f"upsert key columns {missing or '[]'} are not in the output")
            if self.version_column is not None and self.version_column not in self.columns:
                raise ValueError(f"version column {self.version_column!r} is not in the output")

    def write(
        self,
        rows: Iterable[Sequence[Any]],
        *,
        gid: str | None,
        pipeline: str,
        batch_id: int,
    ) -> int:
        """Write ``rows`` in one transaction: prepared under ``gid``, or committed if None."""
        return self.write_with(self.rows_body(rows), gid=gid, pipeline=pipeline, batch_id=batch_id)

    def rows_body(self, rows: Iterable[Sequence[Any]]) -> Callable[[psycopg.Connection[Any]], int]:
        """The body of a transaction that writes Python row tuples (COPY or upsert)."""

        def body(conn: psycopg.Connection[Any]) -> int:
            return self._copy(conn, rows) if self.mode == "append" else self._upsert(conn, rows)

        return body

    def write_with(
        self,
        body: Callable[[psycopg.Connection[Any]], int],
        *,
        gid: str | None,
        pipeline: str,
        batch_id: int,
    ) -> int:
        """Run ``body`` (it writes, returns its row count) in one transaction, then finish it.

        The transaction is prepared under ``gid`` with the participant's marker, or simply
        committed when ``gid`` is None (at-least-once and idempotent modes).
        """
        with psycopg.connect(self.dsn, connect_timeout=self.connect_timeout) as conn:
            conn.execute(
                "SELECT set_config('lock_timeout', %s, true), set_config('TimeZone', 'UTC', true)",
                (str(self.lock_timeout_ms),),
            )
            count = body(conn)
            if gid is None:
                conn.commit()
            else:
                write_marker(conn, gid, pipeline, batch_id, count)
                prepare(conn, gid)
        return count

    def copy_statement(self, options: str = "") -> sql.Composed:
        """``COPY table (columns) FROM STDIN`` with optional ``WITH (...)`` options."""
        statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
            table_identifier(self.table), sql.SQL(", ").join(map(sql.Identifier, self.columns))
        )
        return statement + sql.SQL(options) if options else statement

    def _copy(self, conn: psycopg.Connection[Any], rows: Iterable[Sequence[Any]]) -> int:
        statement = self.copy_statement()
        count = 0
        with conn.cursor() as cur, cur.copy(statement) as copy:
            for row in rows:
                copy.write_row(row)
                count += 1
        return count

    def _upsert(self, conn: psycopg.Connection[Any], rows: Iterable[Sequence[Any]]) -> int:
        key_idx = [self.columns.index(k) for k in self.key_columns]
        ver_idx = None if self.version_column is None else self.columns.index(self.version_column)
        latest: dict[tuple[Any, ...], Sequence[Any]] = {}
        for row in rows:
            key = tuple(row[i] for i in key_idx)
            held = latest.get(key)
            if held is None or ver_idx is None or _not_older(row[ver_idx], held[ver_idx]):
                latest[key] = row
        if not latest:
            return 0
        conn.cursor().executemany(self._upsert_sql(), list(latest.values()))
        return len(latest)

    def _upsert_sql(self) -> sql.Composed:
        updates = [c for c in self.columns if c not in self.key_columns]
        target = table_identifier(self.table)
        if updates:
            action = sql.SQL("DO UPDATE SET {}").format(
                sql.SQL(", ").join(
                    sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in updates
                )
            )
            if self.version_column is not None:
                stored = sql.SQL("{}.{}").format(target, sql.Identifier(self.version_column))
                incoming = sql.SQL("EXCLUDED.{}").format(sql.Identifier(self.version_column))
                action = sql.SQL("{} WHERE {} IS NULL OR ({} IS NOT NULL AND {} <= {})").format(
                    action, stored, incoming, stored, incoming
                )
        else:
            action = sql.Composed([sql.SQL("DO NOTHING")])
        return sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) {}").format(
            target,
            sql.SQL(", ").join(map(sql.Identifier, self.columns)),
            sql.SQL(", ").join(sql.Placeholder() * len(self.columns)),
            sql.SQL(", ").join(map(sql.Identifier, self.key_columns)),
            action,
        )


def _not_older(candidate: Any, held: Any) -> bool:
    """Whether a row with version ``candidate`` replaces one with ``held`` (NULL is oldest).

    The same rule as the SQL guard of ``_upsert_sql``, so the result does not depend on how
    records fall into batches.
    """
    if held is None:
        return True
    if candidate is None:
        return False
    return bool(candidate >= held)
