"""One writer task's transaction against a PostgreSQL table.

Append uses COPY (an order of magnitude faster than row INSERTs). Upsert COPYs into an UNLOGGED
staging table of its own (PostgreSQL refuses to PREPARE a transaction that touched a temporary
table, so the brief's temporary staging table cannot be used), merges it into the target with one
``INSERT ... SELECT DISTINCT ON (keys) ... ON CONFLICT DO UPDATE`` and drops it, all inside the
participant's transaction. Rows must be hash-partitioned by key before they reach the writers,
so two participants never lock the same key.

Upsert ordering, one rule in the staging dedup and in the conflict guard: the row with the
highest ``versionColumn`` wins; a NULL version is older than any other (a stored NULL is
replaced by any incoming row, an incoming NULL never replaces a stored non-NULL); among equal
versions the later row wins.
Without a version column the order is undefined (Spark's shuffle does not keep source order),
which is why ``eo validate`` warns about it.

Every transaction pins ``TimeZone`` to UTC: a value without an offset (a ``TIMESTAMP_NTZ``
wall time) must not depend on the server's or the role's default zone.

In exactly-once mode the transaction ends with a marker row and PREPARE TRANSACTION; in
at-least-once and idempotent modes it simply commits.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from eo_jobs.protocol.connection import REOPEN_SECONDS, connect_patiently, with_keepalives
from eo_jobs.protocol.xa import prepare, write_marker

ORDINAL = "_eo_ordinal"
"""Input-order column of an upsert's staging table."""
Feed = Callable[[psycopg.Connection[Any], sql.Composed], int]
"""Runs the COPY statement it is given and returns the rows it copied."""

SESSION_SQL = "SELECT set_config('lock_timeout', %s, true), set_config('TimeZone', 'UTC', true)"
"""The writer transaction's settings (lock_timeout in ms); the JVM writer runs the same text."""
LOCK_TIMEOUT_MS = 30_000
"""A writer blocked this long (e.g. on a zombie's prepared lock) fails instead of hanging."""


def storable_text(text: str | None) -> str:
    """Text PostgreSQL accepts (dead letters keep every record): NUL spelled ``\\u0000``."""
    return (text or "").replace("\x00", "\\u0000")


def rows_feed(rows: Iterable[Sequence[Any]]) -> Feed:
    """A COPY feed of Python row tuples (psycopg adapts each value)."""

    def copy_rows(conn: psycopg.Connection[Any], statement: sql.Composed) -> int:
        count = 0
        with conn.cursor() as cur, cur.copy(statement) as copy:
            for row in rows:
                copy.write_row(row)
                count += 1
        return count

    return copy_rows


def table_identifier(table: str) -> sql.Identifier:
    """``schema.table`` as a quoted identifier (never spliced as text)."""
    schema, _, name = table.partition(".")
    return sql.Identifier(schema, name)


@dataclass(frozen=True)
class Pieces:
    """Writes pieces of a task's rows in its transaction (``PostgresWriter.pieces``)."""

    write: Callable[[Feed], int]
    """Runs one piece's feed; the piece's rows written (upsert: merged)."""
    close: Callable[[], None]
    """After the last piece (upsert: drops the staging table)."""


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
    add_columns: tuple[str, ...] = ()
    """Mode accumulate: the columns summed per key and added onto the stored row."""

    def __post_init__(self) -> None:
        if self.mode not in ("append", "upsert", "accumulate"):
            raise ValueError(f"unknown mode {self.mode!r}")
        if self.mode != "append":
            missing = [k for k in self.key_columns if k not in self.columns]
            if not self.key_columns or missing:
                raise ValueError(f"{self.mode} key columns {missing or '[]'} are not in the output")
            if self.version_column is not None and self.version_column not in self.columns:
                raise ValueError(f"version column {self.version_column!r} is not in the output")
        if self.mode == "accumulate":
            named = {*self.key_columns, *self.add_columns}
            if not self.add_columns or named != set(self.columns):
                raise ValueError(
                    f"accumulate writes its key and add columns only: the output has "
                    f"{', '.join(self.columns)}; keyColumns {', '.join(self.key_columns)}, "
                    f"addColumns {', '.join(self.add_columns) or '[]'}"
                )

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
        """The body of a transaction that writes Python row tuples (COPY, or staged upsert)."""
        return self.body(rows_feed(rows))

    def body(self, feed: Feed, options: str = "") -> Callable[[psycopg.Connection[Any]], int]:
        """A transaction body: ``feed`` runs the COPY it is given (with ``options``).

        Append copies straight into the table. Upsert copies into a staging table of its own
        and merges it with one ``INSERT ... SELECT DISTINCT ON (keys) ... ON CONFLICT``.
        """

        def run(conn: psycopg.Connection[Any]) -> int:
            if self.mode == "append":
                return feed(conn, self.copy_statement(table_identifier(self.table), options))
            return self._upsert(conn, feed, options)

        return run

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
        # A task that starts while its server restarts (a crash, a failover) waits for it
        # rather than failing: Spark's few quick retries would all land in the same gap.
        with connect_patiently(
            self.conninfo(), REOPEN_SECONDS, connect_timeout=self.connect_timeout
        ) as conn:
            self.begin(conn)
            count = body(conn)
            if gid is None:
                conn.commit()
            else:
                write_marker(conn, gid, pipeline, batch_id, count)
                prepare(conn, gid)
        return count

    def conninfo(self) -> str:
        """The DSN with keepalives, and UTF-8 declared as the client encoding.

        Every byte this writer sends is UTF-8 (psycopg's rows, Arrow's CSV, pgpq's binary
        text). Left to the server default, a LATIN1 database would take those bytes as LATIN1
        and store mojibake; declared, the server converts, and a character the database
        cannot hold is refused (SQLSTATE 22P05), which makes its record a dead letter.
        """
        return psycopg.conninfo.make_conninfo(with_keepalives(self.dsn), client_encoding="UTF8")

    def begin(self, conn: psycopg.Connection[Any]) -> None:
        """The transaction's settings (``SESSION_SQL``), first in every writer transaction."""
        conn.execute(SESSION_SQL, (str(self.lock_timeout_ms),))

    def copy_statement(self, table: sql.Composable, options: str = "") -> sql.Composed:
        """``COPY table (columns) FROM STDIN`` with optional ``(...)`` options."""
        statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
            table, sql.SQL(", ").join(map(sql.Identifier, self.columns))
        )
        return statement + sql.SQL(" " + options) if options else statement

    def _upsert(self, conn: psycopg.Connection[Any], feed: Feed, options: str) -> int:
        """COPY into a staging table, merge it into the target, drop it; rows merged."""
        stage = sql.Identifier("eo", f"stage_{uuid.uuid4().hex}")
        create, merge, drop = self.upsert_statements(stage)
        conn.execute(create)
        feed(conn, self.copy_statement(stage, options))
        merged = conn.execute(merge).rowcount
        conn.execute(drop)
        return merged

    def upsert_statements(
        self, stage: sql.Identifier
    ) -> tuple[sql.Composed, sql.Composed, sql.Composed]:
        """Create ``stage``, merge it into the target, drop it: an upsert around its COPY.

        The staging table is UNLOGGED and dropped in the same transaction (PostgreSQL refuses
        to PREPARE a transaction that touched a *temporary* table, not an unlogged one). Its
        identity column keeps the input order, so "the later row wins among equal versions"
        means the same in one batch as across batches.

        It holds the written columns only, made by ``CREATE TABLE ... AS SELECT`` from the
        target: their types, typmods and collations (binary COPY's type check holds for the
        stage as for the target), and no constraint. ``LIKE`` would copy every column's NOT
        NULL, so a target column the pipeline does not write (``id bigserial``,
        ``updated_at ... NOT NULL DEFAULT now()``) would be NULL in the stage and fail every
        batch; the target's own constraints and defaults apply at the merge.
        """
        columns = sql.SQL(", ").join(map(sql.Identifier, self.columns))
        create = sql.SQL(
            "CREATE UNLOGGED TABLE {stage} AS SELECT {columns} FROM {target} WITH NO DATA; "
            "ALTER TABLE {stage} ADD COLUMN {ordinal} bigint GENERATED ALWAYS AS IDENTITY"
        ).format(
            stage=stage,
            columns=columns,
            target=table_identifier(self.table),
            ordinal=sql.Identifier(ORDINAL),
        )
        return create, self._merge_sql(stage), sql.SQL("DROP TABLE {}").format(stage)

    def pieces(self, conn: psycopg.Connection[Any]) -> Pieces:
        """A writer of one piece of rows at a time, for ``refusals.isolate`` (the slow path).

        Append copies each piece into the table. Upsert keeps one staging table for every
        piece (a table per piece would hold a lock each until the transaction ends): each
        piece is copied into it, merged, and deleted from it, so a piece rolled back to its
        savepoint leaves the stage as it was.
        """
        if self.mode == "append":
            target = table_identifier(self.table)
            return Pieces(lambda feed: feed(conn, self.copy_statement(target)), lambda: None)
        stage = sql.Identifier("eo", f"stage_{uuid.uuid4().hex}")
        create, merge, drop = self.upsert_statements(stage)
        clear = self.clear_statement(stage)
        conn.execute(create)

        def piece(feed: Feed) -> int:
            feed(conn, self.copy_statement(stage))
            merged = conn.execute(merge).rowcount
            conn.execute(clear)
            return merged

        def close() -> None:
            conn.execute(drop)

        return Pieces(piece, close)

    @staticmethod
    def clear_statement(stage: sql.Identifier) -> sql.Composed:
        """Empty the staging table after a piece was merged (``pieces``)."""
        return sql.SQL("DELETE FROM {}").format(stage)

    def _merge_sql(self, stage: sql.Identifier) -> sql.Composed:
        if self.mode == "accumulate":
            return self._accumulate_sql(stage)
        updates = [c for c in self.columns if c not in self.key_columns]
        target = table_identifier(self.table)
        columns = sql.SQL(", ").join(map(sql.Identifier, self.columns))
        keys = sql.SQL(", ").join(map(sql.Identifier, self.key_columns))
        order: list[sql.Composable] = [sql.Identifier(k) for k in self.key_columns]
        if self.version_column is not None:
            order.append(sql.SQL("{} DESC NULLS LAST").format(sql.Identifier(self.version_column)))
        order.append(sql.SQL("{} DESC").format(sql.Identifier(ORDINAL)))
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
        return sql.SQL(
            "INSERT INTO {target} ({columns}) SELECT DISTINCT ON ({keys}) {columns} FROM {stage} "
            "ORDER BY {order} ON CONFLICT ({keys}) {action}"
        ).format(
            target=target,
            columns=columns,
            keys=keys,
            stage=stage,
            order=sql.SQL(", ").join(order),
            action=action,
        )

    def _accumulate_sql(self, stage: sql.Identifier) -> sql.Composed:
        """Sum the stage per key and add the sums onto the stored rows (mode accumulate).

        ``ON CONFLICT DO UPDATE`` may touch a row once per statement, so the stage is summed
        per key first. A stored NULL counts as 0 (``COALESCE``); a NULL addend never gets here
        (``runtime.poison`` makes its record a dead letter) and would add nothing if it did.
        The statement's row count is the number of keys written, not of input rows.
        """
        target = table_identifier(self.table)
        picked = [
            sql.SQL("sum({0})").format(sql.Identifier(c))
            if c in self.add_columns
            else sql.Identifier(c)
            for c in self.columns
        ]
        adds = [
            sql.SQL("{0} = COALESCE({1}.{0}, 0) + COALESCE(EXCLUDED.{0}, 0)").format(
                sql.Identifier(c), target
            )
            for c in self.add_columns
        ]
        keys = sql.SQL(", ").join(map(sql.Identifier, self.key_columns))
        return sql.SQL(
            "INSERT INTO {target} ({columns}) SELECT {picked} FROM {stage} GROUP BY {keys} "
            "ON CONFLICT ({keys}) DO UPDATE SET {adds}"
        ).format(
            target=target,
            columns=sql.SQL(", ").join(map(sql.Identifier, self.columns)),
            picked=sql.SQL(", ").join(picked),
            stage=stage,
            keys=keys,
            adds=sql.SQL(", ").join(adds),
        )
