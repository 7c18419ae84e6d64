"""The control tables: fence, decision log, failures and markers, in schema ``eo``.

The decision row is the commit point of a batch. It is written in one short transaction that
first updates the pipeline's fence row guarded by ``epoch = E``: the row lock serialises the
decision with a concurrent fence raise, and zero rows updated means a newer epoch owns the
pipeline. Pipeline and sink names are always bound parameters, never SQL text.

The fence row also names its owner: the writer (an operator's pipeline object, by its UID, or
whoever ``eo run --fence-owner`` names) whose drivers may run under it. Epochs order the
drivers of one owner; the owner keeps two writers that share a database but not their
bookkeeping (two clusters, a restored object) from both planning the same epoch.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from eo_jobs.protocol.connection import LazyConnection
from eo_jobs.protocol.control_api import (
    ControlDatabase,
    Decision,
    Fence,
    FenceChange,
    Key,
    LifecycleRecord,
    ParticipantDatabase,
    Sums,
    Timing,
)
from eo_jobs.protocol.errors import FencedError, FenceRegressionError, ProtocolError

log = logging.getLogger("eo.control")

__all__ = [  # the records moved to control_api; importers of them from here keep working
    "DDL",
    "FENCE_OWNER_ENV",
    "MARKER_RETENTION_BATCHES",
    "SCHEMA_LOCK_KEY",
    "STUCK_HOLDER_SECONDS",
    "ControlStore",
    "Decision",
    "Fence",
    "FenceChange",
    "FenceTakenError",
    "ForeignFenceOwnerError",
    "SchemaUpgradeError",
    "Sums",
    "ensure_schema",
]

SCHEMA_LOCK_KEY = 0x656F_0001
"""Advisory lock serialising concurrent schema creation (CREATE IF NOT EXISTS races)."""

DDL = (
    ("eo", "CREATE SCHEMA IF NOT EXISTS eo"),
    (
        "eo.fence",
        """CREATE TABLE IF NOT EXISTS eo.fence (
        pipeline text PRIMARY KEY,
        epoch bigint NOT NULL CHECK (epoch > 0),
        updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        owner text)""",
    ),
    (
        # Added after the table: a database created by an older eo gets the column here.
        "eo.fence.owner",
        "ALTER TABLE eo.fence ADD COLUMN IF NOT EXISTS owner text",
    ),
    (
        "eo.decisions",
        """CREATE TABLE IF NOT EXISTS eo.decisions (
        pipeline text NOT NULL,
        query_id text NOT NULL,
        batch_id bigint NOT NULL CHECK (batch_id >= 0),
        epoch bigint NOT NULL,
        participants text[] NOT NULL,
        source_offsets jsonb,
        rows_written bigint NOT NULL DEFAULT 0,
        prepare_ms double precision,
        decide_ms double precision,
        commit_ms double precision,
        decided_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        committed_at timestamptz,
        PRIMARY KEY (pipeline, query_id, batch_id))""",
    ),
    (
        # Added after the table: per sink, the sums of its declared sum columns over the rows
        # the batch wrote there (``Coordinator.decide``), what the audit checks the table with.
        "eo.decisions.sums",
        "ALTER TABLE eo.decisions ADD COLUMN IF NOT EXISTS sums jsonb",
    ),
    (
        "eo.decisions_by_batch",
        "CREATE INDEX IF NOT EXISTS decisions_by_batch ON eo.decisions (pipeline, batch_id)",
    ),
    (
        "eo.decisions_by_time",
        "CREATE INDEX IF NOT EXISTS decisions_by_time ON eo.decisions (pipeline, decided_at)",
    ),
    (
        "eo.failures",
        """CREATE TABLE IF NOT EXISTS eo.failures (
        id bigserial PRIMARY KEY,
        pipeline text NOT NULL,
        query_id text,
        batch_id bigint,
        epoch bigint,
        reason text NOT NULL,
        failed_at timestamptz NOT NULL DEFAULT clock_timestamp())""",
    ),
    (
        "eo.failures_by_time",
        "CREATE INDEX IF NOT EXISTS failures_by_time ON eo.failures (pipeline, failed_at)",
    ),
    (
        "eo.markers",
        """CREATE TABLE IF NOT EXISTS eo.markers (
        gid text PRIMARY KEY,
        pipeline text NOT NULL,
        batch_id bigint NOT NULL,
        rows_written bigint NOT NULL,
        created_at timestamptz NOT NULL DEFAULT clock_timestamp())""",
    ),
    (
        "eo.database_identity",
        """CREATE TABLE IF NOT EXISTS eo.database_identity (
        singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
        id uuid NOT NULL DEFAULT gen_random_uuid())""",
    ),
    (
        "eo.decided_by",
        """CREATE TABLE IF NOT EXISTS eo.decided_by (
        pipeline text PRIMARY KEY,
        control_database uuid NOT NULL,
        control_label text NOT NULL,
        claimed_at timestamptz NOT NULL DEFAULT clock_timestamp())""",
    ),
    (
        "eo.participant_databases",
        """CREATE TABLE IF NOT EXISTS eo.participant_databases (
        pipeline text NOT NULL,
        database uuid NOT NULL,
        sink text NOT NULL,
        label text NOT NULL,
        dsn_ref jsonb NOT NULL,
        first_seen timestamptz NOT NULL DEFAULT clock_timestamp(),
        PRIMARY KEY (pipeline, database, sink))""",
    ),
)
"""Every object of schema ``eo`` with the statement that creates it (the last three are the
registry of ``protocol.registry``); a three-part name is a column added to an older table."""

FENCE_OWNER_ENV = "EO_FENCE_OWNER"
"""The driver's fence owner (the operator sets it to the pipeline object's UID; ``eo run
--fence-owner`` sets it too). Unset, a driver runs only under a fence nobody owns."""

STUCK_HOLDER_SECONDS = 5.0
"""A decision transaction holding the fence row this long is frozen, not slow."""
MARKER_RETENTION_BATCHES = 1000
"""Markers of batches this far behind the last committed one are pruned."""


def _missing(conn: psycopg.Connection[Any]) -> list[str]:
    """Statements of the objects that do not exist yet."""
    names = [name for name, _ in DDL]
    row = conn.execute(
        """SELECT array_agg(n) FROM unnest(%s::text[]) AS n WHERE CASE
           WHEN n = 'eo' THEN to_regnamespace(n) IS NULL
           WHEN n LIKE '%%.%%.%%' THEN NOT EXISTS (
             SELECT 1 FROM pg_attribute
             WHERE attrelid = to_regclass(split_part(n, '.', 1) || '.' || split_part(n, '.', 2))
               AND attname = split_part(n, '.', 3) AND NOT attisdropped)
           ELSE to_regclass(n) IS NULL END""",
        (names,),
    ).fetchone()
    absent = set(row[0] or []) if row else set(names)
    return [statement for name, statement in DDL if name in absent]


def ensure_schema(conn: psycopg.Connection[Any]) -> None:
    """Create what is missing of the control schema; no DDL at all when everything exists.

    ``CREATE SCHEMA IF NOT EXISTS`` checks the database's CREATE privilege before it checks
    existence, so running it at every start would stop a least-privilege driver role (see
    docs/protocol.md, "Privileges") even after an administrator created the schema.
    """
    if not _missing(conn):
        return
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK_KEY,))
            for statement in _missing(conn):
                conn.execute(statement)
    except psycopg.errors.InsufficientPrivilege as exc:
        missing = _missing(conn)
        if not missing or not all(s.startswith("ALTER TABLE") for s in missing):
            raise  # objects missing, not only columns: the bootstrap's usual privilege error
        raise SchemaUpgradeError(
            "the control schema was created by an older eo and lacks what this one records "
            f"({str(exc).strip()}); run as the owner of schema eo's tables: " + "; ".join(missing)
        ) from exc


class FenceTakenError(FenceRegressionError):
    """A claim at the epoch another writer (or nobody) holds the fence at: go above it."""

    def __init__(self, pipeline: str, epoch: int, owner: str | None) -> None:
        super().__init__(pipeline, epoch, epoch)
        self.args = (
            f"the sink fence of {pipeline} is already at epoch {epoch}, raised by "
            f"{'a writer that names no owner' if owner is None else repr(owner)}, which may "
            f"run a driver with it: claim it with an epoch above {epoch}",
        )


class SchemaUpgradeError(ProtocolError):
    """Schema ``eo`` lacks a column this version needs, and this role may not add it."""


class ForeignFenceOwnerError(FencedError):
    """The fence is owned by another writer: this one may not claim it or run under it.

    A subclass of ``FencedError`` so that a driver refused here exits as fenced (75).
    """

    def __init__(
        self, pipeline: str, epoch: int, fence: int, owner: str, claimant: str | None
    ) -> None:
        self.pipeline, self.epoch, self.fence = pipeline, epoch, fence
        self.owner, self.claimant = owner, claimant
        ProtocolError.__init__(
            self,
            f"the sink fence of {pipeline} (epoch {fence}) is owned by {owner!r}, not by "
            f"{claimant!r}: another writer (a second cluster, a restored object, a manual run) "
            f"runs this pipeline on the same database; refusing to run beside it. Hand over "
            f"once {owner!r} is stopped: release it (`eo release-fence PIPELINE.yaml --owner "
            f"{owner}`) or name it in the pipeline's eo.dev/adopt-fence annotation",
        )


def _terminate_holders(dsn: str, waiter: int) -> None:
    """Terminate the backends that block ``waiter`` and wait for nothing themselves.

    A frozen decision transaction waits for nothing; another raise of the same pipeline queued
    before ``waiter`` does (on the same holder), and is left to finish. Zero stands for a
    prepared transaction, which has no backend. A decision waiting for synchronous
    replication (wait event ``SyncRep``) is left too: it is already committed locally, and
    ending it would make it visible without its standby having it, so a failover to that
    standby could lose a decision whose participants a sink on another server keeps (the next
    driver would replay the batch: a duplicate). The raise then waits for its lock timeout and
    is retried; the standby is what needs fixing. (Seeing another role's wait event takes
    ``pg_read_all_stats``, or being that role.)
    """
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        rows = conn.execute(
            """SELECT b.pid, a.wait_event IS NOT DISTINCT FROM 'SyncRep' AS syncrep,
                      CASE WHEN a.wait_event IS DISTINCT FROM 'SyncRep'
                           THEN pg_terminate_backend(b.pid) END
               FROM unnest(pg_blocking_pids(%s)) AS b(pid)
               LEFT JOIN pg_stat_activity a ON a.pid = b.pid
               WHERE b.pid <> 0 AND cardinality(pg_blocking_pids(b.pid)) = 0""",
            (waiter,),
        ).fetchall()
    for pid, syncrep, ended in rows:
        if syncrep:
            log.warning(
                "backend %s holds the fence row while it waits for synchronous replication: "
                "not ending it (its decision would become visible without its standby); "
                "check synchronous_standby_names and the standby",
                pid,
            )
        elif ended:
            log.warning("terminated backend %s: it held the fence row too long", pid)


@contextlib.contextmanager
def _terminating_stuck_holders(dsn: str, waiter: int) -> Iterator[None]:
    """While the block runs, end backends that keep ``waiter`` waiting too long."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(STUCK_HOLDER_SECONDS):
            try:
                _terminate_holders(dsn, waiter)
            except psycopg.Error as exc:
                # Without the privilege the raise ends with its lock timeout instead.
                log.warning(
                    "cannot end the backend holding the fence row for %.0fs: %s (the fencing "
                    "role needs pg_signal_backend, or to be the holder's role)",
                    STUCK_HOLDER_SECONDS,
                    str(exc).strip(),
                )
                return

    watcher = threading.Thread(target=watch, name="eo-fence-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


class ControlStore(LazyConnection, ControlDatabase):
    """Fence, decisions and failures of one coordinator database."""

    def ensure_schema(self) -> None:
        """Create the control tables if they are missing."""
        self.run(ensure_schema)

    def has_control_tables(self) -> bool:
        """Whether this database holds the fence and the decision log (read-only check).

        Commands that only report (``eo sweep``, ``eo forget-query``) ask first, so that a
        database the pipeline never ran against is reported as such instead of failing.
        """
        row = self.run(
            lambda conn: conn.execute(
                "SELECT to_regclass('eo.fence') IS NOT NULL "
                "AND to_regclass('eo.decisions') IS NOT NULL"
            ).fetchone()
        )
        return row == (True,)

    def fence_epoch(self, pipeline: str) -> int | None:
        """Current fence of a pipeline, or ``None`` before its first driver."""
        fence = self.fence(pipeline)
        return None if fence is None else fence.epoch

    def fence(self, pipeline: str) -> Fence | None:
        """The fence row of a pipeline (epoch and owner), or ``None`` before its first driver."""
        row = self.run(
            lambda conn: conn.execute(
                "SELECT epoch, owner FROM eo.fence WHERE pipeline = %s", (pipeline,)
            ).fetchone()
        )
        return None if row is None else Fence(int(row[0]), row[1])

    def raise_fence(
        self,
        pipeline: str,
        epoch: int,
        owner: str | None = None,
        *,
        adopt_from: str | None = None,
    ) -> FenceChange:
        """Raise the fence to ``epoch``; equal is a no-op, lower is refused.

        With ``owner`` the raise also claims the fence for that writer, and is refused
        (``ForeignFenceOwnerError``) while another writer owns it, unless ``adopt_from`` names
        that writer: an explicit hand-over. Taking a fence from someone (an adoption, or a
        fence nobody owns) needs an epoch strictly above it (``FenceRegressionError``
        otherwise): that writer may have a driver at the fence's epoch. Without ``owner``
        the raise only fences (``eo recover``, a deletion): it stops drivers, never starts
        one, so anyone may do it; the owner stays.

        Waits for an in-flight decision transaction (it holds the row lock), so once this
        returns no driver with a lower epoch can decide any batch. A decision transaction that
        holds the lock for ``STUCK_HOLDER_SECONDS`` belongs to a frozen or cut-off driver (a
        decision takes milliseconds): its backend is terminated, which rolls the decision back
        (``pg_terminate_backend``: the same role, or one with ``pg_signal_backend``).
        """
        if epoch <= 0:
            raise ValueError("epoch must be positive")
        return self.run(lambda conn: self._raise_fence(conn, pipeline, epoch, owner, adopt_from))

    def _raise_fence(
        self,
        conn: psycopg.Connection[Any],
        pipeline: str,
        epoch: int,
        owner: str | None,
        adopt_from: str | None,
    ) -> FenceChange:
        with conn.transaction(), _terminating_stuck_holders(self.dsn, conn.info.backend_pid):
            # Serialise raises of one pipeline: FOR UPDATE locks nothing while the row does not
            # exist yet, and two first raises would both report "no previous fence".
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('eo.fence:' || %s, 0))",
                (pipeline,),
            )
            row = conn.execute(
                "SELECT epoch, owner FROM eo.fence WHERE pipeline = %s FOR UPDATE", (pipeline,)
            ).fetchone()
            previous = None if row is None else int(row[0])
            held_by = None if row is None else row[1]
            if previous is not None and previous > epoch:
                raise FenceRegressionError(pipeline, epoch, previous)
            if owner is not None and previous is not None and held_by != owner:
                if held_by is not None and held_by != adopt_from:
                    raise ForeignFenceOwnerError(pipeline, epoch, previous, held_by, owner)
                if previous == epoch:
                    raise FenceTakenError(pipeline, epoch, held_by)
            conn.execute(
                """INSERT INTO eo.fence AS f (pipeline, epoch, owner) VALUES (%s, %s, %s)
                   ON CONFLICT (pipeline) DO UPDATE
                   SET epoch = EXCLUDED.epoch, updated_at = clock_timestamp(),
                       owner = coalesce(EXCLUDED.owner, f.owner)
                   WHERE f.epoch < EXCLUDED.epoch""",
                (pipeline, epoch, owner),
            )
        return FenceChange(previous, epoch, held_by)

    def release_fence(self, pipeline: str, owner: str) -> bool:
        """Let go of the fence if ``owner`` holds it (its epoch stays): the hand-over.

        The finalizer of a deleted pipeline does this, so that an object re-created under the
        same name (a new UID) takes the fence above its epoch; ``eo release-fence`` does it for
        a writer that is gone for good (a decommissioned cluster). Returns whether it held it.
        """
        cur = self.run(
            lambda conn: conn.execute(
                """UPDATE eo.fence SET owner = NULL, updated_at = clock_timestamp()
                   WHERE pipeline = %s AND owner = %s""",
                (pipeline, owner),
            )
        )
        return bool(cur.rowcount)

    def decide(
        self,
        *,
        pipeline: str,
        query_id: str,
        batch_id: int,
        epoch: int,
        participants: Sequence[str],
        source_offsets: Any,
        rows_written: int,
        prepare_ms: float,
        sums: Sums | None = None,
    ) -> float:
        """Write the decision of a batch under the fence; return its duration in ms.

        ``sums``: per sink with declared sum columns, each column's exact sum (as decimal text)
        over the rows the batch wrote there, or None where no comparable sum exists.

        Raises ``FencedError`` when the fence moved past ``epoch``. A duplicate decision
        (primary key) cannot happen for a live driver: replays check ``decision`` first.

        A connection found dead (an idle timeout, a restart, ``pg_terminate_backend``) is
        replaced and the decision tried once more. That is safe even when the first try's
        reply was what got lost: the retry first takes the fence row, which the first try's
        transaction held until it committed or aborted, and then finds its decision if it did
        commit, instead of deciding again.
        """
        started = time.perf_counter()
        row = (
            pipeline,
            query_id,
            batch_id,
            epoch,
            list(participants),
            None if source_offsets is None else json.dumps(source_offsets),
            rows_written,
            prepare_ms,
            None if sums is None else json.dumps(sums),
        )
        try:
            self._decide(self.connection(), row, started, retry=False)
        except psycopg.OperationalError:
            if not self.lost():
                raise
            self.close()
            self._decide(self.connection(), row, started, retry=True)
        return (time.perf_counter() - started) * 1000.0

    def _decide(
        self, conn: psycopg.Connection[Any], row: tuple[Any, ...], started: float, *, retry: bool
    ) -> None:
        pipeline, query_id, batch_id, epoch = row[:4]
        with conn.transaction():
            # The commit point must be durable before any participant is committed, even
            # where the database or role defaults to asynchronous commit (a control database
            # on another server than a sink could otherwise lose a decision whose
            # participants were already committed).
            conn.execute("SET LOCAL synchronous_commit = on")
            cur = conn.execute(
                """UPDATE eo.fence SET updated_at = clock_timestamp()
                   WHERE pipeline = %s AND epoch = %s""",
                (pipeline, epoch),
            )
            if cur.rowcount != 1:
                raise FencedError(pipeline, epoch, self._fence_in(conn, pipeline))
            if retry:
                found = conn.execute(
                    """SELECT epoch FROM eo.decisions
                       WHERE pipeline = %s AND query_id = %s AND batch_id = %s""",
                    (pipeline, query_id, batch_id),
                ).fetchone()
                if found is not None:
                    if int(found[0]) != epoch:
                        raise RuntimeError(
                            f"batch {batch_id} of {pipeline} was decided by epoch {found[0]} "
                            f"while epoch {epoch} held the fence"
                        )
                    return  # the first try committed; only its reply was lost
            decide_ms = (time.perf_counter() - started) * 1000.0
            conn.execute(
                """INSERT INTO eo.decisions (pipeline, query_id, batch_id, epoch, participants,
                       source_offsets, rows_written, prepare_ms, sums, decide_ms)
                   VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
                (*row, decide_ms),
            )

    @staticmethod
    def _fence_in(conn: psycopg.Connection[Any], pipeline: str) -> int | None:
        row = conn.execute("SELECT epoch FROM eo.fence WHERE pipeline = %s", (pipeline,)).fetchone()
        return None if row is None else int(row[0])

    def decision(self, pipeline: str, query_id: str, batch_id: int) -> Decision | None:
        """The decision of (pipeline, query, batch), if one exists."""
        row = self.run(
            lambda conn: (
                conn.cursor(row_factory=dict_row)
                .execute(
                    """SELECT * FROM eo.decisions
                   WHERE pipeline = %s AND query_id = %s AND batch_id = %s""",
                    (pipeline, query_id, batch_id),
                )
                .fetchone()
            )
        )
        return None if row is None else _decision(row)

    def queries(self, pipeline: str) -> list[tuple[str, int]]:
        """Query ids with decisions for this pipeline, with their last batch, oldest first."""
        rows = self.run(
            lambda conn: conn.execute(
                """SELECT query_id, max(batch_id) FROM eo.decisions WHERE pipeline = %s
                   GROUP BY query_id ORDER BY min(decided_at)""",
                (pipeline,),
            ).fetchall()
        )
        return [(str(q), int(b)) for q, b in rows]

    def other_queries(self, pipeline: str, query_id: str) -> list[tuple[str, int]]:
        """Other query ids with decisions for this pipeline, with their last batch."""
        return [(q, b) for q, b in self.queries(pipeline) if q != query_id]

    def has_decisions(self, pipeline: str, query_id: str) -> bool:
        """Whether the query has decided any batch."""
        row = self.run(
            lambda conn: conn.execute(
                "SELECT 1 FROM eo.decisions WHERE pipeline = %s AND query_id = %s LIMIT 1",
                (pipeline, query_id),
            ).fetchone()
        )
        return row is not None

    def winners(self, pipeline: str, gids: Iterable[str], batches: Iterable[int]) -> set[str]:
        """The subset of ``gids`` named as participants by some decision of the pipeline."""
        wanted = sorted(set(gids))
        if not wanted:
            return set()
        rows = self.run(
            lambda conn: conn.execute(
                """SELECT DISTINCT g FROM eo.decisions d, unnest(d.participants) AS g
               WHERE d.pipeline = %s AND d.batch_id = ANY(%s) AND g = ANY(%s)""",
                (pipeline, sorted(set(batches)), wanted),
            ).fetchall()
        )
        return {str(r[0]) for r in rows}

    def mark_committed(self, pipeline: str, query_id: str, batch_id: int, commit_ms: float) -> None:
        """Record phase-2 completion (commit duration and time) of a decided batch.

        Committed asynchronously: the mark only feeds health and metrics (nothing in recovery
        reads ``committed_at``), so it need not wait for its own WAL flush, which was ~3.4 ms
        of every micro-batch's critical path (p50, 200,000-row batches). It is visible at once
        and durable once flushed, by the WAL writer within a fraction of a second or by the next
        decision's commit; a crash of the control database's server before that loses it, and
        the batch then reports no phase-2 duration, as a batch finished by recovery does.
        """

        def mark(conn: psycopg.Connection[Any]) -> None:
            with conn.pipeline(), conn.transaction():  # one round trip
                conn.execute("SET LOCAL synchronous_commit = off")
                conn.execute(
                    """UPDATE eo.decisions SET commit_ms = %s, committed_at = clock_timestamp()
                       WHERE pipeline = %s AND query_id = %s AND batch_id = %s
                         AND committed_at IS NULL""",
                    (commit_ms, pipeline, query_id, batch_id),
                )

        self.run(mark)

    def forget_query(self, pipeline: str, query_id: str) -> int:
        """Delete a query's decisions: the explicit way to start a pipeline over."""
        cur = self.run(
            lambda conn: conn.execute(
                "DELETE FROM eo.decisions WHERE pipeline = %s AND query_id = %s",
                (pipeline, query_id),
            )
        )
        return cur.rowcount

    def lifecycle_records(self, pipeline: str) -> list[LifecycleRecord]:
        """``lifecycle_log.records`` on this database."""
        from eo_jobs.protocol import lifecycle_log

        return self.run(lambda conn: lifecycle_log.records(conn, pipeline))

    def record_lifecycle(self, record: LifecycleRecord, forget: Sequence[str] = ()) -> int | None:
        """``lifecycle_log.record_once`` on this database (one transaction: safe to retry)."""
        from eo_jobs.protocol import lifecycle_log

        return self.run(lambda conn: lifecycle_log.record_once(conn, record, forget))

    def prune_lifecycle(self, pipeline: str, kind: str, nonce: str) -> None:
        """``lifecycle_log.prune`` on this database."""
        from eo_jobs.protocol import lifecycle_log

        self.run(lambda conn: lifecycle_log.prune(conn, pipeline, kind, nonce))

    def record_failure(
        self,
        pipeline: str,
        reason: str,
        *,
        query_id: str | None = None,
        batch_id: int | None = None,
        epoch: int | None = None,
    ) -> None:
        """Log a failed batch attempt (feeds the failure-rate metric and alert)."""
        self.connection().execute(
            """INSERT INTO eo.failures (pipeline, query_id, batch_id, epoch, reason)
               VALUES (%s, %s, %s, %s, %s)""",
            (pipeline, query_id, batch_id, epoch, reason[:2000]),
        )

    def recent_decisions(self, pipeline: str, limit: int = 50) -> list[Decision]:
        """The latest decisions, newest first."""
        rows = self.run(
            lambda conn: (
                conn.cursor(row_factory=dict_row)
                .execute(
                    """SELECT * FROM eo.decisions WHERE pipeline = %s
                   ORDER BY decided_at DESC LIMIT %s""",
                    (pipeline, limit),
                )
                .fetchall()
            )
        )
        return [_decision(r) for r in rows]

    def attempts_since(self, pipeline: str, seconds: float) -> tuple[int, int]:
        """(decided batches, failed attempts) within the last ``seconds``."""
        row = self.run(
            lambda conn: conn.execute(
                """SELECT
                 (SELECT count(*) FROM eo.decisions WHERE pipeline = %(p)s
                    AND decided_at > clock_timestamp() - make_interval(secs => %(s)s)),
                 (SELECT count(*) FROM eo.failures WHERE pipeline = %(p)s
                    AND failed_at > clock_timestamp() - make_interval(secs => %(s)s))""",
                {"p": pipeline, "s": seconds},
            ).fetchone()
        )
        assert row is not None
        return int(row[0]), int(row[1])

    def timings(
        self, pipeline: str, since: datetime | None, first_look_seconds: float, keys: Sequence[Key]
    ) -> list[Timing]:
        """Decisions after ``since`` (``None``: the last ``first_look_seconds``) or with one of
        ``keys``, by ``decided_at`` (the operator's tally)."""
        rows = self.run(
            lambda conn: conn.execute(
                """SELECT query_id, batch_id, decided_at, prepare_ms, decide_ms, commit_ms
                   FROM eo.decisions
                   WHERE pipeline = %(p)s
                     AND (decided_at > coalesce(
                            %(since)s, clock_timestamp() - make_interval(secs => %(first)s))
                          OR (query_id, batch_id) IN (
                              SELECT * FROM unnest(%(q)s::text[], %(b)s::bigint[])))
                   ORDER BY decided_at""",
                {
                    "p": pipeline,
                    "since": since,
                    "first": first_look_seconds,
                    "q": [q for q, _ in keys],
                    "b": [b for _, b in keys],
                },
            ).fetchall()
        )
        return [Timing(str(q), int(b), d, p, dm, c) for q, b, d, p, dm, c in rows]

    def failures_after(
        self, pipeline: str, since: datetime | None, first_look_seconds: float
    ) -> list[tuple[int, datetime]]:
        """(id, failed_at) of failures after ``since`` (``None``: the last
        ``first_look_seconds``), oldest first (the operator's tally)."""
        rows = self.run(
            lambda conn: conn.execute(
                """SELECT id, failed_at FROM eo.failures
                   WHERE pipeline = %(p)s
                     AND failed_at > coalesce(
                            %(since)s, clock_timestamp() - make_interval(secs => %(first)s))
                   ORDER BY failed_at""",
                {"p": pipeline, "since": since, "first": first_look_seconds},
            ).fetchall()
        )
        return [(int(i), f) for i, f in rows]

    def audited_batch(self, pipeline: str, query: str) -> int | None:
        """``retention.audited_batch`` on this database."""
        from eo_jobs.protocol import retention

        return self.run(lambda conn: retention.audited_batch(conn, pipeline, query))

    def record_audited(self, pipeline: str, batches: Mapping[str, int]) -> None:
        """``retention.record_audited`` on this database."""
        from eo_jobs.protocol import retention

        self.run(lambda conn: retention.record_audited(conn, pipeline, batches))

    def forget_audited(self, pipeline: str) -> None:
        """``retention.forget_audited`` on this database."""
        from eo_jobs.protocol import retention

        self.run(lambda conn: retention.forget_audited(conn, pipeline))

    def identity(self) -> str:
        """``eo.database_identity``'s id, created on first use (schema ``eo`` exists)."""
        conn = self.connection()
        conn.execute("INSERT INTO eo.database_identity DEFAULT VALUES ON CONFLICT DO NOTHING")
        row = conn.execute("SELECT id::text FROM eo.database_identity").fetchone()
        assert row is not None
        return str(row[0])

    def label(self) -> str:
        """``host:port/dbname`` of the DSN (no user, no password)."""
        info = psycopg.conninfo.conninfo_to_dict(self.dsn)
        return f"{info.get('host', 'localhost')}:{info.get('port', 5432)}/{info.get('dbname', '')}"

    def record_participant_database(
        self, pipeline: str, database: str, sink: str, label: str, dsn_ref: Mapping[str, Any]
    ) -> None:
        """Record (or refresh the label and reference of) a database holding participants."""
        self.connection().execute(
            """INSERT INTO eo.participant_databases (pipeline, database, sink, label, dsn_ref)
               VALUES (%s, %s, %s, %s, %s)
               ON CONFLICT (pipeline, database, sink)
               DO UPDATE SET dsn_ref = EXCLUDED.dsn_ref, label = EXCLUDED.label""",
            (pipeline, database, sink, label, json.dumps(dict(dsn_ref))),
        )

    def participant_databases(self, pipeline: str) -> list[ParticipantDatabase]:
        """Every database recorded holding participants of ``pipeline``, first seen first."""
        conn = self.connection()
        if conn.execute("SELECT to_regclass('eo.participant_databases')").fetchone() == (None,):
            return []
        rows = conn.execute(
            """SELECT sink, database::text, label, dsn_ref FROM eo.participant_databases
               WHERE pipeline = %s ORDER BY first_seen""",
            (pipeline,),
        ).fetchall()
        return [ParticipantDatabase(str(s), str(d), str(lbl), dict(ref)) for s, d, lbl, ref in rows]


def _decision(row: dict[str, Any]) -> Decision:
    return Decision(
        pipeline=row["pipeline"],
        query_id=row["query_id"],
        batch_id=int(row["batch_id"]),
        epoch=int(row["epoch"]),
        participants=tuple(row["participants"]),
        source_offsets=row["source_offsets"],
        rows_written=int(row["rows_written"]),
        decided_at=row["decided_at"],
        committed_at=row["committed_at"],
        prepare_ms=row["prepare_ms"],
        decide_ms=row["decide_ms"],
        commit_ms=row["commit_ms"],
    )
