"""The control tables in MySQL/MariaDB: fence, decision log, failures, audit positions, registry.

The MySQL kind of ``control_api.ControlDatabase``, with the semantics of the PostgreSQL
``control.ControlStore`` (read its docstrings first); a pipeline whose only database is MySQL
keeps its control tables next to its sink tables. MySQL has no schemas inside a database, so
the tables are ``eo_fence``, ``eo_decisions``, ``eo_failures``, ``eo_audited``,
``eo_participant_databases``, plus the sink's ``eo_database_identity`` and ``eo_decided_by``
(the same tables a MySQL sink creates: a database that is both control and sink has one
identity). All InnoDB: only InnoDB has transactions and row locks.

What differs from PostgreSQL, and why (docs/mysql.md, "The control database"):

* Raises of one pipeline are serialised by a named lock (``GET_LOCK``, server-wide, so its name
  hashes the database and the pipeline) instead of ``pg_advisory_xact_lock``. A row lock cannot
  do it while the row does not exist, and ``SELECT ... FOR UPDATE`` of a missing row takes a gap
  lock that two first raises would both hold and then deadlock on with their inserts.
* The decision locks the fence row with ``SELECT ... FOR UPDATE`` and compares the epoch in
  Python: MySQL's affected-row count of an ``UPDATE`` counts changed rows, not matched ones, so
  a guard ``WHERE epoch = E`` that sets the same timestamp could report zero.
* A decision holding the fence row for ``STUCK_HOLDER_SECONDS`` is ended with ``KILL
  CONNECTION``, found through ``information_schema.INNODB_LOCK_WAITS``/``INNODB_TRX`` (MariaDB,
  MySQL 5.7) or ``performance_schema.data_lock_waits`` (MySQL 8). That needs the ``PROCESS``
  privilege to see and, for another user's connection, ``CONNECTION ADMIN``/``SUPER``; without
  them the raise's wait is bounded by ``innodb_lock_wait_timeout`` (``LOCK_WAIT_SECONDS``, set
  per session) and the raise fails, to be retried by its caller, as PostgreSQL's
  ``lock_timeout`` does.
* The decision's durability rests on the server's ``innodb_flush_log_at_trx_commit=1`` (the
  default; a global setting, not one a session can force as ``synchronous_commit`` is).
  ``mark_committed`` is an ordinary commit: MySQL has no per-transaction asynchronous commit.
* Timestamps are ``TIMESTAMP(6)`` read in a session whose time zone is UTC, returned aware.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import pymysql
import pymysql.cursors

from eo_jobs.protocol.control import (
    STUCK_HOLDER_SECONDS,
    FenceTakenError,
    ForeignFenceOwnerError,
)
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
from eo_jobs.protocol.errors import FencedError, FenceRegressionError
from eo_jobs.protocol.mysql_xa import (
    DECIDED_BY_DDL,
    IDENTITY_DDL,
    LOST_CONNECTION,
    REOPEN_SECONDS,
    MySqlDsn,
    connect_patiently,
    error_code,
)

log = logging.getLogger("eo.control")

T = TypeVar("T")
if TYPE_CHECKING:
    Conn: TypeAlias = pymysql.Connection[pymysql.cursors.Cursor]

LOCK_WAIT_SECONDS = 10
"""Session ``innodb_lock_wait_timeout`` and ``lock_wait_timeout`` (PostgreSQL's 10 s
``lock_timeout`` of ``connection.LazyConnection``)."""
STATEMENT_SECONDS = 120
"""Session ``max_statement_time`` (MariaDB; MySQL has no equivalent for writes)."""
UNKNOWN_SYSTEM_VARIABLE = 1193
LOCK_WAIT_TIMEOUT = 1205
UNKNOWN_TABLE = 1109
NO_SUCH_TABLE = 1146

DDL: tuple[tuple[str, str], ...] = (
    (
        "eo_fence",
        """CREATE TABLE IF NOT EXISTS `eo_fence` (
        pipeline VARCHAR(512) NOT NULL PRIMARY KEY,
        epoch BIGINT NOT NULL CHECK (epoch > 0),
        updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
        owner VARCHAR(512) NULL
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    ),
    (
        "eo_decisions",
        """CREATE TABLE IF NOT EXISTS `eo_decisions` (
        pipeline VARCHAR(512) NOT NULL,
        query_id VARCHAR(200) CHARACTER SET ascii NOT NULL,
        batch_id BIGINT NOT NULL CHECK (batch_id >= 0),
        epoch BIGINT NOT NULL,
        participants LONGTEXT NOT NULL CHECK (json_valid(participants)),
        source_offsets LONGTEXT NULL CHECK (source_offsets IS NULL OR json_valid(source_offsets)),
        rows_written BIGINT NOT NULL DEFAULT 0,
        prepare_ms DOUBLE NULL,
        decide_ms DOUBLE NULL,
        commit_ms DOUBLE NULL,
        decided_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
        committed_at TIMESTAMP(6) NULL DEFAULT NULL,
        sums LONGTEXT NULL CHECK (sums IS NULL OR json_valid(sums)),
        PRIMARY KEY (pipeline, query_id, batch_id),
        KEY eo_decisions_by_batch (pipeline, batch_id),
        KEY eo_decisions_by_time (pipeline, decided_at)
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    ),
    (
        "eo_failures",
        """CREATE TABLE IF NOT EXISTS `eo_failures` (
        id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
        pipeline VARCHAR(512) NOT NULL,
        query_id VARCHAR(200) NULL,
        batch_id BIGINT NULL,
        epoch BIGINT NULL,
        reason TEXT NOT NULL,
        failed_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
        KEY eo_failures_by_time (pipeline, failed_at)
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    ),
    ("eo_database_identity", IDENTITY_DDL),
    ("eo_decided_by", DECIDED_BY_DDL),
    (
        "eo_participant_databases",
        """CREATE TABLE IF NOT EXISTS `eo_participant_databases` (
        pipeline VARCHAR(512) NOT NULL,
        `database` CHAR(36) CHARACTER SET ascii NOT NULL,
        sink VARCHAR(200) NOT NULL,
        label VARCHAR(512) NOT NULL,
        dsn_ref LONGTEXT NOT NULL CHECK (json_valid(dsn_ref)),
        first_seen TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
        PRIMARY KEY (pipeline, `database`, sink)
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    ),
)
"""Every control table with the statement that creates it (JSON as checked ``LONGTEXT``:
MariaDB's ``JSON`` is that alias, and MySQL's binary JSON would reorder nothing we rely on)."""

AUDITED_DDL = """CREATE TABLE IF NOT EXISTS `eo_audited` (
    pipeline VARCHAR(512) NOT NULL,
    query VARCHAR(200) NOT NULL,
    batch_id BIGINT NOT NULL,
    audited_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (pipeline, query)
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"""
"""``retention.AUDITED_DDL`` for MySQL (created by the operator when it first records one)."""


LIFECYCLE_DDL = """CREATE TABLE IF NOT EXISTS `eo_lifecycle` (
    pipeline VARCHAR(512) NOT NULL,
    kind VARCHAR(16) CHARACTER SET ascii NOT NULL CHECK (kind IN ('snapshot', 'start-over')),
    nonce VARCHAR(64) CHARACTER SET ascii NOT NULL,
    name VARCHAR(128) NOT NULL,
    epoch BIGINT NOT NULL,
    detail LONGTEXT NOT NULL CHECK (json_valid(detail)),
    taken_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    pruned_at TIMESTAMP(6) NULL DEFAULT NULL,
    PRIMARY KEY (pipeline, kind, nonce)
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"""
"""``lifecycle_log.LIFECYCLE_DDL`` for MySQL (created by the first record)."""


def fence_lock_name(database: str, pipeline: str) -> str:
    """The ``GET_LOCK`` name serialising raises of ``pipeline`` in ``database`` (named locks
    are server-wide and at most 64 characters, so both are hashed)."""
    digest = hashlib.sha256(f"{database}\0{pipeline}".encode()).hexdigest()
    return f"eo.fence:{digest[:48]}"


def _utc(value: datetime | None) -> datetime | None:
    """A naive ``TIMESTAMP`` read in a UTC session, made aware."""
    return None if value is None else value.replace(tzinfo=UTC)


class MySqlControlStore(ControlDatabase):
    """Fence, decisions and failures of one MySQL/MariaDB coordinator database."""

    def __init__(self, dsn: str, *, lock_wait_seconds: int = LOCK_WAIT_SECONDS) -> None:
        self.dsn = dsn
        self.target = MySqlDsn.parse(dsn)
        self._lock_wait = lock_wait_seconds
        self._conn: Conn | None = None
        self._seen = False

    # -- connection -------------------------------------------------------------------------

    def _open(self, wait: float) -> Conn:
        conn = connect_patiently(self.target, wait)
        with conn.cursor() as cur:
            cur.execute(
                "SET SESSION time_zone = '+00:00', innodb_lock_wait_timeout = %s, "
                "lock_wait_timeout = %s",
                (self._lock_wait, self._lock_wait),
            )
            try:
                cur.execute("SET SESSION max_statement_time = %s", (STATEMENT_SECONDS,))
            except pymysql.OperationalError as exc:
                if error_code(exc) != UNKNOWN_SYSTEM_VARIABLE:  # MySQL: not a variable
                    raise
        return conn

    def connection(self) -> Conn:
        """The open connection; a closed one is replaced (patiently once one was seen)."""
        if self._conn is None or not self._conn.open:
            self._conn = self._open(REOPEN_SECONDS if self._seen else 0.0)
            self._seen = True
        return self._conn

    def run(self, work: Callable[[Conn], T]) -> T:
        """Run idempotent ``work``; once more on a new connection if the old one died."""
        try:
            return work(self.connection())
        except pymysql.OperationalError as exc:
            if error_code(exc) not in LOST_CONNECTION:
                raise
            self.close()
            return work(self.connection())

    def query(self, statement: str, args: Any = None) -> list[tuple[Any, ...]]:
        """Rows of one idempotent autocommit statement."""

        def work(conn: Conn) -> list[tuple[Any, ...]]:
            with conn.cursor() as cur:
                cur.execute(statement, args)
                return list(cur.fetchall())

        return self.run(work)

    def execute(self, statement: str, args: Any = None) -> int:
        """Affected rows of one autocommit statement (not retried: it may not be idempotent)."""
        with self.connection().cursor() as cur:
            return int(cur.execute(statement, args))

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._conn is not None:
            with contextlib.suppress(pymysql.Error):
                self._conn.close()
            self._conn = None

    @contextlib.contextmanager
    def _transaction(self, conn: Conn) -> Iterator[pymysql.cursors.Cursor]:
        """One transaction on ``conn``: committed when the block ends, else rolled back."""
        conn.begin()
        try:
            with conn.cursor() as cur:
                yield cur
            conn.commit()
        except BaseException:
            with contextlib.suppress(pymysql.Error):
                conn.rollback()
            raise

    # -- schema -----------------------------------------------------------------------------

    def _existing(self, names: Iterable[str]) -> set[str]:
        rows = self.query(
            "SELECT TABLE_NAME FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN %s",
            (tuple(names),),
        )
        return {str(r[0]) for r in rows}

    def ensure_schema(self) -> None:
        """Create the control tables that are missing; no DDL at all when every one exists
        (a least-privilege role keeps starting against tables an administrator created)."""
        existing = self._existing(name for name, _ in DDL)
        for name, statement in DDL:
            if name not in existing:
                self.query(statement)

    def has_control_tables(self) -> bool:
        """Whether this database holds ``eo_fence`` and ``eo_decisions`` (read-only)."""
        return self._existing(("eo_fence", "eo_decisions")) == {"eo_fence", "eo_decisions"}

    # -- fence ------------------------------------------------------------------------------

    def fence(self, pipeline: str) -> Fence | None:
        """The fence row of a pipeline (epoch and owner), or ``None`` before its first driver."""
        rows = self.query("SELECT epoch, owner FROM `eo_fence` WHERE pipeline = %s", (pipeline,))
        return None if not rows else Fence(int(rows[0][0]), rows[0][1])

    def raise_fence(
        self,
        pipeline: str,
        epoch: int,
        owner: str | None = None,
        *,
        adopt_from: str | None = None,
    ) -> FenceChange:
        """``ControlStore.raise_fence`` in MySQL: same rules, same waits (module docstring).

        Serialised per pipeline by a named lock, taken before the transaction and released
        after it; then the fence row is locked (``FOR UPDATE``), which waits for an in-flight
        decision. A decision or a raise that keeps the raise waiting ``STUCK_HOLDER_SECONDS``
        while waiting for nothing itself is ended (``KILL CONNECTION``).
        """
        if epoch <= 0:
            raise ValueError("epoch must be positive")
        return self.run(lambda conn: self._raise_fence(conn, pipeline, epoch, owner, adopt_from))

    def _raise_fence(
        self, conn: Conn, pipeline: str, epoch: int, owner: str | None, adopt_from: str | None
    ) -> FenceChange:
        name = fence_lock_name(self.target.database, pipeline)
        with conn.cursor() as cur:
            cur.execute("SELECT CONNECTION_ID()")
            me = cur.fetchone()
        assert me is not None
        with _killing_stuck_holders(self.target, int(me[0]), name):
            with conn.cursor() as cur:
                cur.execute("SELECT GET_LOCK(%s, %s)", (name, self._lock_wait))
                got = cur.fetchone()
            if got is None or got[0] != 1:
                # The same error as a row lock wait that timed out: callers retry either.
                raise pymysql.err.OperationalError(
                    LOCK_WAIT_TIMEOUT,
                    f"raising the sink fence of {pipeline}: another raise of it held the lock "
                    f"{name!r} for {self._lock_wait}s (IS_USED_LOCK names its connection); "
                    "retry once it has finished",
                )
            try:
                with self._transaction(conn) as cur:
                    cur.execute(
                        "SELECT epoch, owner FROM `eo_fence` WHERE pipeline = %s FOR UPDATE",
                        (pipeline,),
                    )
                    row = cur.fetchone()
                    previous = None if row is None else int(row[0])
                    held_by = None if row is None else row[1]
                    if previous is not None and previous > epoch:
                        raise FenceRegressionError(pipeline, epoch, previous)
                    if owner is not None and previous is not None and held_by != owner:
                        if held_by is not None and held_by != adopt_from:
                            raise ForeignFenceOwnerError(pipeline, epoch, previous, held_by, owner)
                        if previous == epoch:
                            raise FenceTakenError(pipeline, epoch, held_by)
                    if previous is None:
                        cur.execute(
                            "INSERT INTO `eo_fence` (pipeline, epoch, owner) VALUES (%s, %s, %s)",
                            (pipeline, epoch, owner),
                        )
                    elif previous < epoch:
                        cur.execute(
                            """UPDATE `eo_fence` SET epoch = %s,
                                   updated_at = CURRENT_TIMESTAMP(6), owner = COALESCE(%s, owner)
                               WHERE pipeline = %s""",
                            (epoch, owner, pipeline),
                        )
            finally:
                with contextlib.suppress(pymysql.Error), conn.cursor() as cur:
                    cur.execute("SELECT RELEASE_LOCK(%s)", (name,))
        return FenceChange(previous, epoch, held_by)

    def release_fence(self, pipeline: str, owner: str) -> bool:
        """Let go of the fence if ``owner`` holds it (its epoch stays); whether it held it."""
        return bool(
            self.execute(
                """UPDATE `eo_fence` SET owner = NULL, updated_at = CURRENT_TIMESTAMP(6)
                   WHERE pipeline = %s AND owner = %s""",
                (pipeline, owner),
            )
        )

    # -- decisions --------------------------------------------------------------------------

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
        """``ControlStore.decide`` in MySQL: one short transaction that locks the fence row,
        checks its epoch (``FencedError`` otherwise) and inserts the decision.

        A connection found dead is replaced and the decision tried once more; the retry takes
        the fence row first (the first try's transaction held it until it ended) and then finds
        the first try's decision if it committed, instead of deciding again.
        """
        started = time.perf_counter()
        row = (
            pipeline,
            query_id,
            batch_id,
            epoch,
            json.dumps(list(participants)),
            None if source_offsets is None else json.dumps(source_offsets),
            rows_written,
            prepare_ms,
            None if sums is None else json.dumps(sums),
        )
        try:
            self._decide(self.connection(), row, started, retry=False)
        except pymysql.OperationalError as exc:
            if error_code(exc) not in LOST_CONNECTION:
                raise
            self.close()
            self._decide(self.connection(), row, started, retry=True)
        return (time.perf_counter() - started) * 1000.0

    def _decide(self, conn: Conn, row: tuple[Any, ...], started: float, *, retry: bool) -> None:
        pipeline, query_id, batch_id, epoch = row[:4]
        with self._transaction(conn) as cur:
            cur.execute("SELECT epoch FROM `eo_fence` WHERE pipeline = %s FOR UPDATE", (pipeline,))
            fence = cur.fetchone()
            if fence is None or int(fence[0]) != epoch:
                raise FencedError(pipeline, epoch, None if fence is None else int(fence[0]))
            cur.execute(
                "UPDATE `eo_fence` SET updated_at = CURRENT_TIMESTAMP(6) WHERE pipeline = %s",
                (pipeline,),
            )
            if retry:
                cur.execute(
                    """SELECT epoch FROM `eo_decisions`
                       WHERE pipeline = %s AND query_id = %s AND batch_id = %s FOR UPDATE""",
                    (pipeline, query_id, batch_id),
                )
                found = cur.fetchone()
                if found is not None:
                    if int(found[0]) != epoch:
                        raise RuntimeError(
                            f"batch {batch_id} of {pipeline} was decided by epoch {found[0]} "
                            f"while epoch {epoch} held the fence"
                        )
                    return  # the first try committed; only its reply was lost
            decide_ms = (time.perf_counter() - started) * 1000.0
            cur.execute(
                """INSERT INTO `eo_decisions` (pipeline, query_id, batch_id, epoch, participants,
                       source_offsets, rows_written, prepare_ms, sums, decide_ms)
                   VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
                (*row, decide_ms),
            )

    def decision(self, pipeline: str, query_id: str, batch_id: int) -> Decision | None:
        """The decision of (pipeline, query, batch), if one exists."""
        rows = self.query(
            """SELECT pipeline, query_id, batch_id, epoch, participants, source_offsets,
                   rows_written,
                   decided_at, committed_at, prepare_ms, decide_ms, commit_ms
               FROM `eo_decisions` WHERE pipeline = %s AND query_id = %s AND batch_id = %s""",
            (pipeline, query_id, batch_id),
        )
        return _decision(rows[0]) if rows else None

    def queries(self, pipeline: str) -> list[tuple[str, int]]:
        """Query ids with decisions for this pipeline, with their last batch, oldest first."""
        rows = self.query(
            """SELECT query_id, MAX(batch_id) FROM `eo_decisions` WHERE pipeline = %s
               GROUP BY query_id ORDER BY MIN(decided_at)""",
            (pipeline,),
        )
        return [(str(q), int(b)) for q, b in rows]

    def has_decisions(self, pipeline: str, query_id: str) -> bool:
        """Whether the query has decided any batch."""
        return bool(
            self.query(
                "SELECT 1 FROM `eo_decisions` WHERE pipeline = %s AND query_id = %s LIMIT 1",
                (pipeline, query_id),
            )
        )

    def winners(self, pipeline: str, gids: Iterable[str], batches: Iterable[int]) -> set[str]:
        """The subset of ``gids`` named as participants by some decision of the pipeline
        among ``batches`` (the participant lists are read and matched here: portable across
        MySQL and MariaDB, and a handful of batches at a time)."""
        wanted = set(gids)
        numbers = sorted(set(batches))
        if not wanted or not numbers:
            return set()
        rows = self.query(
            "SELECT participants FROM `eo_decisions` WHERE pipeline = %s AND batch_id IN %s",
            (pipeline, tuple(numbers)),
        )
        named: set[str] = set()
        for (participants,) in rows:
            named.update(json.loads(participants))
        return wanted & named

    def mark_committed(self, pipeline: str, query_id: str, batch_id: int, commit_ms: float) -> None:
        """Record phase-2 completion of a decided batch (an ordinary commit in MySQL)."""
        self.run(
            lambda conn: conn.cursor().execute(
                """UPDATE `eo_decisions`
                   SET commit_ms = %s, committed_at = CURRENT_TIMESTAMP(6)
                   WHERE pipeline = %s AND query_id = %s AND batch_id = %s
                     AND committed_at IS NULL""",
                (commit_ms, pipeline, query_id, batch_id),
            )
        )

    def forget_query(self, pipeline: str, query_id: str) -> int:
        """Delete a query's decisions: the explicit way to start a pipeline over."""
        return self.execute(
            "DELETE FROM `eo_decisions` WHERE pipeline = %s AND query_id = %s",
            (pipeline, query_id),
        )

    def lifecycle_records(self, pipeline: str) -> list[LifecycleRecord]:
        """``ControlDatabase.lifecycle_records`` from ``eo_lifecycle``."""
        if not self._existing(("eo_lifecycle",)):
            return []
        rows = self.query(
            """SELECT pipeline, kind, nonce, name, epoch, detail, taken_at, pruned_at
               FROM `eo_lifecycle` WHERE pipeline = %s ORDER BY taken_at, kind, nonce""",
            (pipeline,),
        )
        return [
            LifecycleRecord(
                pipeline=str(r[0]),
                kind=str(r[1]),
                nonce=str(r[2]),
                name=str(r[3]),
                epoch=int(r[4]),
                detail=dict(json.loads(r[5])),
                taken_at=_utc(r[6]),
                pruned_at=_utc(r[7]),
            )
            for r in rows
        ]

    def record_lifecycle(self, record: LifecycleRecord, forget: Sequence[str] = ()) -> int | None:
        """``ControlDatabase.record_lifecycle``: the insert and the delete in one transaction
        (the insert first: a duplicate key means recorded already, and nothing is deleted)."""
        if not self._existing(("eo_lifecycle",)):
            self.query(LIFECYCLE_DDL)
        conn = self.connection()
        with self._transaction(conn) as cur:
            cur.execute(
                """SELECT 1 FROM `eo_lifecycle` WHERE pipeline = %s AND kind = %s AND nonce = %s
                   FOR UPDATE""",
                (record.pipeline, record.kind, record.nonce),
            )
            if cur.fetchall():
                return None
            deleted = 0
            for query_id in forget:
                deleted += int(
                    cur.execute(
                        "DELETE FROM `eo_decisions` WHERE pipeline = %s AND query_id = %s",
                        (record.pipeline, query_id),
                    )
                )
            detail = {**record.detail, **({"forgottenDecisions": deleted} if forget else {})}
            cur.execute(
                """INSERT INTO `eo_lifecycle` (pipeline, kind, nonce, name, epoch, detail)
                   VALUES (%s, %s, %s, %s, %s, %s)""",
                (
                    record.pipeline,
                    record.kind,
                    record.nonce,
                    record.name,
                    record.epoch,
                    json.dumps(detail),
                ),
            )
        return deleted

    def prune_lifecycle(self, pipeline: str, kind: str, nonce: str) -> None:
        """``ControlDatabase.prune_lifecycle`` in ``eo_lifecycle``."""
        self.execute(
            """UPDATE `eo_lifecycle` SET pruned_at = CURRENT_TIMESTAMP(6)
               WHERE pipeline = %s AND kind = %s AND nonce = %s AND pruned_at IS NULL""",
            (pipeline, kind, nonce),
        )

    def recent_decisions(self, pipeline: str, limit: int = 50) -> list[Decision]:
        """The latest decisions, newest first."""
        rows = self.query(
            """SELECT pipeline, query_id, batch_id, epoch, participants, source_offsets,
                   rows_written,
                   decided_at, committed_at, prepare_ms, decide_ms, commit_ms
               FROM `eo_decisions` WHERE pipeline = %s ORDER BY decided_at DESC LIMIT %s""",
            (pipeline, limit),
        )
        return [_decision(r) for r in rows]

    def timings(
        self, pipeline: str, since: datetime | None, first_look_seconds: float, keys: Sequence[Key]
    ) -> list[Timing]:
        """Decisions after ``since`` (``None``: the last ``first_look_seconds``) or with one of
        ``keys``, by ``decided_at`` (the operator's tally)."""
        floor = (
            since.astimezone(UTC).replace(tzinfo=None)
            if since is not None and since.tzinfo is not None
            else since
        )
        # No key matches the placeholder pair: batch ids are never negative.
        pairs = tuple(keys) or (("", -1),)
        rows = self.query(
            """SELECT query_id, batch_id, decided_at, prepare_ms, decide_ms, commit_ms
               FROM `eo_decisions`
               WHERE pipeline = %s
                 AND (decided_at > COALESCE(%s, CURRENT_TIMESTAMP(6) - INTERVAL %s MICROSECOND)
                      OR (query_id, batch_id) IN %s)
               ORDER BY decided_at""",
            (pipeline, floor, int(first_look_seconds * 1e6), pairs),
        )
        return [Timing(str(q), int(b), _aware(d), p, dm, c) for q, b, d, p, dm, c in rows]

    # -- failures ---------------------------------------------------------------------------

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
        self.execute(
            """INSERT INTO `eo_failures` (pipeline, query_id, batch_id, epoch, reason)
               VALUES (%s, %s, %s, %s, %s)""",
            (pipeline, query_id, batch_id, epoch, reason[:2000]),
        )

    def failures_after(
        self, pipeline: str, since: datetime | None, first_look_seconds: float
    ) -> list[tuple[int, datetime]]:
        """(id, failed_at) of failures after ``since`` (``None``: the last
        ``first_look_seconds``), oldest first (the operator's tally)."""
        floor = (
            since.astimezone(UTC).replace(tzinfo=None)
            if since is not None and since.tzinfo is not None
            else since
        )
        rows = self.query(
            """SELECT id, failed_at FROM `eo_failures`
               WHERE pipeline = %s
                 AND failed_at > COALESCE(%s, CURRENT_TIMESTAMP(6) - INTERVAL %s MICROSECOND)
               ORDER BY failed_at""",
            (pipeline, floor, int(first_look_seconds * 1e6)),
        )
        return [(int(i), _aware(f)) for i, f in rows]

    def attempts_since(self, pipeline: str, seconds: float) -> tuple[int, int]:
        """(decided batches, failed attempts) within the last ``seconds``."""
        micros = int(seconds * 1e6)
        rows = self.query(
            """SELECT
                 (SELECT COUNT(*) FROM `eo_decisions` WHERE pipeline = %s
                    AND decided_at > CURRENT_TIMESTAMP(6) - INTERVAL %s MICROSECOND),
                 (SELECT COUNT(*) FROM `eo_failures` WHERE pipeline = %s
                    AND failed_at > CURRENT_TIMESTAMP(6) - INTERVAL %s MICROSECOND)""",
            (pipeline, micros, pipeline, micros),
        )
        return int(rows[0][0]), int(rows[0][1])

    # -- audit positions --------------------------------------------------------------------

    def audited_batch(self, pipeline: str, query: str) -> int | None:
        """``retention.audited_batch`` in MySQL (``eo_audited``; None while it is absent)."""
        from eo_jobs.protocol.retention import AUDIT_HOLD_SECONDS

        if not self._existing(("eo_audited",)):
            return None
        rows = self.query(
            """SELECT batch_id FROM `eo_audited`
               WHERE pipeline = %s AND query = %s
                 AND audited_at > CURRENT_TIMESTAMP(6) - INTERVAL %s SECOND""",
            (pipeline, query, int(AUDIT_HOLD_SECONDS)),
        )
        return int(rows[0][0]) if rows else None

    def record_audited(self, pipeline: str, batches: Mapping[str, int]) -> None:
        """Save the audit position (query token -> last audited batch), creating the table."""
        if not self._existing(("eo_audited",)):
            self.query(AUDITED_DDL)
        conn = self.connection()
        with self._transaction(conn) as cur:
            for query, batch in batches.items():
                cur.execute(
                    """INSERT INTO `eo_audited` (pipeline, query, batch_id) VALUES (%s, %s, %s)
                       ON DUPLICATE KEY UPDATE batch_id = VALUES(batch_id),
                           audited_at = CURRENT_TIMESTAMP(6)""",
                    (pipeline, query, batch),
                )

    def forget_audited(self, pipeline: str) -> None:
        """Drop the pipeline's positions (its audit was switched off)."""
        if self._existing(("eo_audited",)):
            self.execute("DELETE FROM `eo_audited` WHERE pipeline = %s", (pipeline,))

    # -- registry ---------------------------------------------------------------------------

    def identity(self) -> str:
        """``eo_database_identity``'s id, created on first use (shared with a MySQL sink's
        store of the same database, as schema ``eo`` is in PostgreSQL)."""
        self.query("INSERT IGNORE INTO `eo_database_identity` (id) VALUES (UUID())")
        return str(self.query("SELECT id FROM `eo_database_identity`")[0][0])

    def label(self) -> str:
        """``host:port/database`` (no user, no password)."""
        return self.target.label()

    def record_participant_database(
        self, pipeline: str, database: str, sink: str, label: str, dsn_ref: Mapping[str, Any]
    ) -> None:
        """Record (or refresh the label and reference of) a database holding participants."""
        self.query(
            """INSERT INTO `eo_participant_databases`
                   (pipeline, `database`, sink, label, dsn_ref) VALUES (%s, %s, %s, %s, %s)
               ON DUPLICATE KEY UPDATE dsn_ref = VALUES(dsn_ref), label = VALUES(label)""",
            (pipeline, database, sink, label, json.dumps(dict(dsn_ref))),
        )

    def participant_databases(self, pipeline: str) -> list[ParticipantDatabase]:
        """Every database recorded holding participants of ``pipeline``, first seen first."""
        if not self._existing(("eo_participant_databases",)):
            return []
        rows = self.query(
            """SELECT sink, `database`, label, dsn_ref FROM `eo_participant_databases`
               WHERE pipeline = %s ORDER BY first_seen""",
            (pipeline,),
        )
        return [
            ParticipantDatabase(str(s), str(d), str(lbl), dict(json.loads(ref)))
            for s, d, lbl, ref in rows
        ]


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC)


def _decision(row: tuple[Any, ...]) -> Decision:
    (pipeline, query_id, batch_id, epoch, participants, offsets, rows_written) = row[:7]
    decided_at, committed_at, prepare_ms, decide_ms, commit_ms = row[7:]
    return Decision(
        pipeline=str(pipeline),
        query_id=str(query_id),
        batch_id=int(batch_id),
        epoch=int(epoch),
        participants=tuple(json.loads(participants)),
        source_offsets=None if offsets is None else json.loads(offsets),
        rows_written=int(rows_written),
        decided_at=_aware(decided_at),
        committed_at=_utc(committed_at),
        prepare_ms=prepare_ms,
        decide_ms=decide_ms,
        commit_ms=commit_ms,
    )


# -- stuck holders --------------------------------------------------------------------------

_BLOCKERS_MARIADB = """SELECT b.trx_mysql_thread_id, b.trx_state
    FROM information_schema.INNODB_LOCK_WAITS w
    JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id
    JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id
    WHERE r.trx_mysql_thread_id = %s"""
_BLOCKERS_MYSQL8 = """SELECT b.trx_mysql_thread_id, b.trx_state
    FROM performance_schema.data_lock_waits w
    JOIN information_schema.INNODB_TRX r ON r.trx_id = w.REQUESTING_ENGINE_TRANSACTION_ID
    JOIN information_schema.INNODB_TRX b ON b.trx_id = w.BLOCKING_ENGINE_TRANSACTION_ID
    WHERE r.trx_mysql_thread_id = %s"""


def _stuck_holders(conn: Conn, waiter: int, lock_name: str) -> list[int]:
    """Connections keeping ``waiter`` waiting that wait for nothing themselves: a transaction
    holding a row lock it wants (and not in ``LOCK WAIT``), or an idle (``Sleep``) holder of
    the pipeline's named lock (a raise frozen between its statements)."""
    found: list[int] = []
    with conn.cursor() as cur:
        try:
            cur.execute(_BLOCKERS_MARIADB, (waiter,))
        except pymysql.MySQLError as exc:
            if error_code(exc) not in (UNKNOWN_TABLE, NO_SUCH_TABLE):
                raise
            cur.execute(_BLOCKERS_MYSQL8, (waiter,))
        for thread_id, state in cur.fetchall():
            # 0: no connection (a recovered prepared XA branch): nothing to end.
            if thread_id and state != "LOCK WAIT":
                found.append(int(thread_id))
        cur.execute("SELECT IS_USED_LOCK(%s)", (lock_name,))
        holder = cur.fetchone()
        if holder is not None and holder[0] is not None and int(holder[0]) != waiter:
            cur.execute(
                "SELECT COMMAND FROM information_schema.PROCESSLIST WHERE ID = %s", (holder[0],)
            )
            command = cur.fetchone()
            if command is not None and command[0] == "Sleep":
                found.append(int(holder[0]))
        if found:
            # Only live connections (a prepared branch may name a stale thread id).
            cur.execute(
                "SELECT ID FROM information_schema.PROCESSLIST WHERE ID IN %s", (tuple(found),)
            )
            live = {int(r[0]) for r in cur.fetchall()}
            found = [t for t in found if t in live]
    return sorted(set(found))


def _kill_holders(target: MySqlDsn, waiter: int, lock_name: str) -> None:
    conn = connect_patiently(target, 0.0)
    try:
        for thread_id in _stuck_holders(conn, waiter, lock_name):
            with conn.cursor() as cur:
                try:
                    cur.execute(f"KILL CONNECTION {int(thread_id)}")
                except pymysql.MySQLError as exc:
                    if error_code(exc) != 1094:  # unknown thread: it ended meanwhile
                        raise
                    continue
            log.warning(
                "killed connection %s: it held the fence of the pipeline too long", thread_id
            )
    finally:
        with contextlib.suppress(pymysql.Error):
            conn.close()


@contextlib.contextmanager
def _killing_stuck_holders(target: MySqlDsn, waiter: int, lock_name: str) -> Iterator[None]:
    """While the block runs, end connections that keep ``waiter`` waiting too long."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(STUCK_HOLDER_SECONDS):
            try:
                _kill_holders(target, waiter, lock_name)
            except pymysql.MySQLError as exc:
                log.warning(
                    "cannot end the connection holding the fence row for %.0fs: %s (the "
                    "fencing user needs PROCESS to find it and CONNECTION ADMIN or SUPER to end "
                    "another user's connection); the raise waits for innodb_lock_wait_timeout",
                    STUCK_HOLDER_SECONDS,
                    exc,
                )
                return

    watcher = threading.Thread(target=watch, name="eo-fence-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
