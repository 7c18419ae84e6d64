"""Prepared transactions of one PostgreSQL database: list, commit, roll back, verified.

The PostgreSQL kind of ``participants.ParticipantStore``. Phase 2 never guesses.
``COMMIT PREPARED`` failing with SQLSTATE 42704 (unknown gid) means "already committed" only
when the participant's marker row is visible, and "rolled back" otherwise; 55000 ("is busy")
means another session is finishing it right now, so we retry. Both finishers are idempotent, so
the driver, the operator and ``eo recover`` can race on the same gid safely.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
from psycopg import errors, sql

from eo_jobs.protocol.connection import LazyConnection
from eo_jobs.protocol.control import ensure_schema
from eo_jobs.protocol.gid import Gid, pipeline_token
from eo_jobs.protocol.identity import database_key
from eo_jobs.protocol.participants import (
    BUSY_RETRY_SECONDS,
    MARKER_RETENTION_SECONDS,
    PRUNED_PREFIX,
    DatabaseKey,
    InDoubt,
    Outcome,
    ParticipantStore,
    horizon_gid,
)
from eo_jobs.protocol.registry import database_id, decided_by, label
from eo_jobs.protocol.retention import prune_below

__all__ = [
    "BUSY_RETRY_SECONDS",
    "MARKER_RETENTION_SECONDS",
    "MARKER_SQL",
    "PRUNED_PREFIX",
    "InDoubt",
    "Outcome",
    "PreparedTransactions",
    "horizon_gid",
    "prepare",
    "write_marker",
]


class PreparedTransactions(LazyConnection, ParticipantStore):
    """Prepared transactions of one PostgreSQL sink database (the database named by its DSN).

    Its connection is autocommit: COMMIT PREPARED cannot run in a transaction block.
    """

    def ensure_schema(self) -> None:
        """Create the marker table (and the rest of schema ``eo``) if missing."""
        self.run(ensure_schema)

    def in_doubt(self, prefix: str) -> list[InDoubt]:
        """Our prepared transactions whose gid starts with ``prefix``, in this database only."""
        rows = self.run(
            lambda conn: conn.execute(
                """SELECT gid, prepared, owner FROM pg_prepared_xacts
               WHERE database = current_database() AND starts_with(gid, %s)
               ORDER BY prepared""",
                (prefix,),
            ).fetchall()
        )
        found: list[InDoubt] = []
        for gid, prepared, owner in rows:
            parsed = Gid.parse(gid)
            if parsed is not None:
                found.append(InDoubt(gid, parsed, prepared, owner))
        return found

    def server_limits(self) -> tuple[int, int]:
        """(prepared transactions in the whole server, max_prepared_transactions)."""
        row = self.run(
            lambda conn: conn.execute(
                """SELECT (SELECT count(*) FROM pg_prepared_xacts),
                      current_setting('max_prepared_transactions')::int"""
            ).fetchone()
        )
        assert row is not None
        return int(row[0]), int(row[1])

    def database_key(self) -> DatabaseKey:
        """(database, server start, system identifier): ``identity.database_key``."""
        return self.run(database_key)

    def label(self) -> str:
        """``host:port/dbname`` of the DSN."""
        return label(self.dsn)

    def identity(self) -> str:
        """``eo.database_identity``'s id (``registry``)."""
        return self.run(database_id)

    def decided_by(self, pipeline: str, control_id: str, control_label: str) -> tuple[str, str]:
        """``eo.decided_by``'s row of ``pipeline`` (``registry``)."""
        return self.run(lambda conn: decided_by(conn, pipeline, control_id, control_label))

    def marker_visible(self, gid: str) -> bool:
        row = self.run(
            lambda conn: conn.execute("SELECT 1 FROM eo.markers WHERE gid = %s", (gid,)).fetchone()
        )
        return row is not None

    def finish(self, verb: str, gid: str) -> bool:
        """Run COMMIT/ROLLBACK PREPARED; True if it acted, False if the gid was unknown."""
        statement = sql.SQL(verb + " PREPARED {}").format(sql.Literal(gid))
        deadline = time.monotonic() + BUSY_RETRY_SECONDS
        delay = 0.05
        while True:
            try:
                # Retried once on a new connection if the old one died: a repeated COMMIT/
                # ROLLBACK PREPARED of a finished gid answers 42704, decided by the marker.
                self.run(lambda conn: conn.execute(statement))
                return True
            except errors.UndefinedObject:
                return False
            except errors.ObjectNotInPrerequisiteState:
                # 55000 is what COMMIT/ROLLBACK PREPARED raises only for "prepared transaction
                # ... is busy" (another session is finishing it; the message is localized, the
                # code is not). 55006 (ObjectInUse), caught here before, is never raised.
                if time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def pruned_up_to(self, pipeline: str, query: str) -> int | None:
        """The highest batch of this pipeline's query whose markers were pruned here, if any
        (tokens, as in a gid)."""
        row = self.run(
            lambda conn: conn.execute(
                "SELECT batch_id FROM eo.markers WHERE gid = %s", (horizon_gid(pipeline, query),)
            ).fetchone()
        )
        return None if row is None else int(row[0])

    def prune_markers(self, pipeline: str, below_batch: int, audited: int | None = None) -> int:
        """Delete markers of batches well behind ``below_batch`` and old (bounded growth).

        A marker goes once it is both ``MARKER_RETENTION_BATCHES`` behind and
        ``MARKER_RETENTION_SECONDS`` old, and, when the operator's audit recorded a position
        (``audited``, that query's last audited batch), once the audit is past it, within the
        bounds of ``retention.prune_below``. The highest batch pruned is kept as the database's
        prune horizon of its streaming query (a row of its own, ``horizon_gid``), so that
        ``commit`` of a participant whose marker was pruned is told apart from one rolled back
        against the decision log.
        """
        token = pipeline_token(pipeline)

        def prune(conn: psycopg.Connection[Any]) -> int:
            with conn.transaction():
                rows = conn.execute(
                    """WITH gone AS (
                         DELETE FROM eo.markers
                         WHERE pipeline = %s AND batch_id < %s
                           AND NOT starts_with(gid, %s)
                           AND created_at < clock_timestamp() - make_interval(secs => %s)
                         RETURNING gid, batch_id)
                       SELECT split_part(gid, ':', 3), count(*), max(batch_id) FROM gone
                       GROUP BY 1""",
                    (
                        pipeline,
                        prune_below(below_batch, audited),
                        PRUNED_PREFIX,
                        MARKER_RETENTION_SECONDS,
                    ),
                ).fetchall()
                for query, _count, highest in rows:
                    conn.execute(
                        """INSERT INTO eo.markers (gid, pipeline, batch_id, rows_written)
                           VALUES (%s, %s, %s, 0)
                           ON CONFLICT (gid) DO UPDATE
                           SET batch_id = greatest(eo.markers.batch_id, EXCLUDED.batch_id)""",
                        (horizon_gid(token, str(query)), pipeline, int(highest)),
                    )
                return sum(int(count) for _query, count, _highest in rows)

        return self.run(prune)


MARKER_SQL = (
    "INSERT INTO eo.markers (gid, pipeline, batch_id, rows_written) VALUES (%s, %s, %s, %s)"
)
"""The participant's marker; the JVM writer's tasks insert it with the same text."""


def write_marker(
    conn: psycopg.Connection[Any], gid: str, pipeline: str, batch_id: int, rows: int
) -> None:
    """Insert the participant's marker inside its (about to be prepared) transaction."""
    conn.execute(MARKER_SQL, (gid, pipeline, batch_id, rows))


def prepare(conn: psycopg.Connection[Any], gid: str) -> None:
    """End the current transaction with PREPARE TRANSACTION (durable, invisible)."""
    conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
