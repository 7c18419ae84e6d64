"""The MySQL kind of ParticipantStore and the writer's branch, on the real MariaDB server.

Outcomes mean what they mean for PostgreSQL (``tests/protocol``): finishing twice is
idempotent, a gid the server does not know is decided by its marker row, and ``XAER_NOTA``
(1397) for a branch still attached to its writer's connection is never taken as "rolled back".
"""

from __future__ import annotations

import threading

import pymysql
import pytest

from eo_jobs.protocol.control import MARKER_RETENTION_BATCHES
from eo_jobs.protocol.errors import InvariantViolationError, LostParticipantError
from eo_jobs.protocol.gid import Gid, pipeline_prefix
from eo_jobs.protocol.mysql_xa import BranchAttachedError, MySqlPreparedTransactions
from eo_jobs.protocol.participants import Outcome
from eo_jobs.protocol.recovery import distinct
from eo_jobs.sinks.mysql.refusals import RefusedRecordError
from eo_jobs.sinks.mysql.writer import MySqlWriter
from tests.support.mariadb import MariaDbDatabase, connection_id, wait_disconnected

PIPELINE = "default/ledger"
QUERY = "3f2b0c9e-8d1a-4c6b-9e2f-0a1b2c3d4e5f"
COLUMNS = ("id", "amount")


def gid(batch: int = 0, task: int = 0, epoch: int = 1, attempt: int = 0) -> str:
    return str(
        Gid.build(
            pipeline=PIPELINE,
            query_id=QUERY,
            sink="ledger",
            epoch=epoch,
            batch=batch,
            task=task,
            attempt=attempt,
        )
    )


@pytest.fixture
def store(mariadb_db: MariaDbDatabase) -> MySqlPreparedTransactions:
    """The store, with its marker table and a ledger table with a primary key."""
    with mariadb_db.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE ledger (id BIGINT PRIMARY KEY, amount BIGINT) ENGINE=InnoDB")
    found = MySqlPreparedTransactions(mariadb_db.dsn, busy_retry_seconds=1.0)
    found.ensure_schema()
    return found


def writer(db: MariaDbDatabase, table: str = "ledger") -> MySqlWriter:
    return MySqlWriter(db.dsn, table, COLUMNS, lock_wait_timeout_s=2)


def rows(store: MySqlPreparedTransactions) -> list[int]:
    return [int(r[0]) for r in store.query("SELECT id FROM ledger ORDER BY id")]


def listed(store: MySqlPreparedTransactions) -> list[str]:
    return [x.gid for x in store.in_doubt(pipeline_prefix(PIPELINE))]


def test_a_written_branch_is_prepared_invisible_and_listed_by_its_gid(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    count = writer(mariadb_db).write(
        [(i, i * 10) for i in range(2500)], gid=gid(), pipeline=PIPELINE, batch_id=0
    )
    assert count == 2500
    assert listed(store) == [gid()]
    assert rows(store) == [] and not store.marker_visible(gid())
    assert store.commit(gid()) == Outcome.COMMITTED
    assert len(rows(store)) == 2500 and store.marker_visible(gid())
    marker = store.query("SELECT pipeline, batch_id, rows_written FROM eo_markers")
    assert marker == [(PIPELINE, 0, 2500)]


def test_commit_and_rollback_are_verified_and_idempotent(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    w = writer(mariadb_db)
    w.write([(1, 1)], gid=gid(task=0), pipeline=PIPELINE, batch_id=0)
    w.write([(2, 2)], gid=gid(task=1), pipeline=PIPELINE, batch_id=0)
    assert store.commit(gid(task=0)) == Outcome.COMMITTED
    assert store.commit(gid(task=0)) == Outcome.ALREADY_COMMITTED
    assert store.rollback(gid(task=1)) == Outcome.ROLLED_BACK
    assert store.rollback(gid(task=1)) == Outcome.ALREADY_ROLLED_BACK
    assert store.rollback(gid(task=7)) == Outcome.ALREADY_ROLLED_BACK  # never prepared
    with pytest.raises(LostParticipantError):
        store.commit(gid(task=1))
    with pytest.raises(InvariantViolationError):
        store.rollback(gid(task=0))
    assert rows(store) == [1] and listed(store) == []


def test_a_branch_still_attached_to_its_writer_is_not_taken_for_rolled_back(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    """A writer frozen between XA PREPARE and its disconnect (a zombie): XA ROLLBACK answers
    1397 as for an unknown xid, but XA RECOVER lists the branch: the store waits, then raises,
    and the branch is still there to be finished once the connection has ended."""
    w = writer(mariadb_db)
    conn = w.connect()
    w.write_on(conn, [(1, 1)], gid=gid(), pipeline=PIPELINE, batch_id=0)
    with pytest.raises(BranchAttachedError):
        store.rollback(gid())
    assert listed(store) == [gid()]
    ended = connection_id(conn)
    conn.close()
    wait_disconnected(mariadb_db.server, ended)
    assert store.rollback(gid()) == Outcome.ROLLED_BACK
    assert listed(store) == [] and rows(store) == []


def test_a_decided_branch_whose_writer_disconnects_late_is_committed_once_it_does(
    mariadb_db: MariaDbDatabase,
) -> None:
    store = MySqlPreparedTransactions(mariadb_db.dsn, busy_retry_seconds=20.0)
    store.ensure_schema()
    with mariadb_db.connect() as c, c.cursor() as cur:
        cur.execute("CREATE TABLE ledger (id BIGINT PRIMARY KEY, amount BIGINT) ENGINE=InnoDB")
    w = writer(mariadb_db)
    conn = w.connect()
    w.write_on(conn, [(1, 1)], gid=gid(), pipeline=PIPELINE, batch_id=0)
    closer = threading.Timer(0.5, conn.close)
    closer.start()
    try:
        assert store.commit(gid()) == Outcome.COMMITTED
    finally:
        closer.join()
    assert rows(store) == [1]


def test_a_failed_write_rolls_its_branch_back_and_leaves_the_connection_clean(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    """A failed statement does not fail a MariaDB branch: the writer ends and rolls it back
    itself, so nothing is prepared and the connection can start the next branch."""
    w = writer(mariadb_db)
    conn = w.connect()
    try:
        with pytest.raises(RefusedRecordError) as failed:
            w.write_on(conn, [(1, 1), (1, 2)], gid=gid(task=0), pipeline=PIPELINE, batch_id=0)
        assert isinstance(failed.value.__cause__, pymysql.IntegrityError)
        assert listed(store) == []
        w.write_on(conn, [(3, 3)], gid=gid(task=1), pipeline=PIPELINE, batch_id=0)
    finally:
        conn.close()
    assert listed(store) == [gid(task=1)]
    assert store.commit(gid(task=1)) == Outcome.COMMITTED
    assert rows(store) == [3]


def test_a_table_name_is_quoted_not_spliced(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    name = "odd`name; DROP TABLE ledger"
    with mariadb_db.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE `odd``name; DROP TABLE ledger` (id BIGINT, amount BIGINT)")
    writer(mariadb_db, name).write([(5, 5)], gid=gid(), pipeline=PIPELINE, batch_id=0)
    store.commit(gid())
    assert store.query("SELECT id FROM `odd``name; DROP TABLE ledger`") == [(5,)]
    assert rows(store) == []  # ledger is still there


def test_one_database_is_one_store_and_each_database_lists_only_its_branches(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    other = mariadb_db.server.create_database(mariadb_db.name + "_b")
    with other.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE ledger (id BIGINT PRIMARY KEY, amount BIGINT) ENGINE=InnoDB")
    other_store = MySqlPreparedTransactions(other.dsn)
    other_store.ensure_schema()
    writer(other).write([(9, 9)], gid=gid(), pipeline=PIPELINE, batch_id=0)
    assert listed(store) == [] and listed(other_store) == [gid()]
    spelled = MySqlPreparedTransactions(store.dsn.replace("127.0.0.1", "localhost"))
    assert len(distinct({"a": store, "b": spelled})) == 1
    assert len(distinct({"a": store, "b": other_store})) == 2
    assert other_store.rollback(gid()) == Outcome.ROLLED_BACK


def test_marker_pruning_keeps_a_horizon_that_tells_a_pruned_marker_from_a_loss(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    w = writer(mariadb_db)
    for batch in range(4):
        w.write([(batch, batch)], gid=gid(batch=batch), pipeline=PIPELINE, batch_id=batch)
        store.commit(gid(batch=batch))
    store.query(  # batches 0-2 two days ago, batch 3 just now
        "UPDATE eo_markers SET created_at = created_at - INTERVAL 2 DAY WHERE batch_id < 3"
    )
    far = 3 + MARKER_RETENTION_BATCHES + 1
    assert store.prune_markers(PIPELINE, below_batch=far) == 3
    assert store.prune_markers(PIPELINE, below_batch=far) == 0
    assert store.commit(gid(batch=1)) == Outcome.MARKER_PRUNED
    assert store.commit(gid(batch=3)) == Outcome.ALREADY_COMMITTED
    with pytest.raises(LostParticipantError):
        store.commit(gid(batch=5))


def test_server_limits_count_the_servers_prepared_branches(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    before, limit = store.server_limits()
    writer(mariadb_db).write([(1, 1)], gid=gid(), pipeline=PIPELINE, batch_id=0)
    after, _ = store.server_limits()
    assert after == before + 1 and limit == 16384 // 16 * 128 // 2
    store.rollback(gid())


def test_the_server_cuts_a_frozen_writer_after_its_wait_timeout_and_frees_its_branch(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    """A writer frozen after XA PREPARE (never closing) holds its branch only until the
    server's ``wait_timeout`` for its session: then the branch is prepared and detached."""
    w = MySqlWriter(mariadb_db.dsn, "ledger", COLUMNS, session_wait_timeout_s=2)
    conn = w.connect()
    w.write_on(conn, [(1, 1)], gid=gid(), pipeline=PIPELINE, batch_id=0)
    ended = connection_id(conn)
    wait_disconnected(mariadb_db.server, ended, timeout=15.0)  # conn is never closed here
    assert listed(store) == [gid()]
    assert store.commit(gid()) == Outcome.COMMITTED
    assert rows(store) == [1]
