"""Property: any interleaving of drivers, crashes, recoveries and replays stays exactly-once.

Drivers are generators that yield after every protocol step (begin, each prepare, decide,
each commit), so hypothesis can interleave a zombie with the live driver at any point, crash
either (it simply stops: its prepared transactions stay behind, its connections too), and run
recovery (fence to a new epoch, resolve, start a new driver that replays from batch 0, as
Spark does from its checkpoint). After every step no source row may appear twice; at the end,
a last recovery and replay must leave every row exactly once and nothing prepared.

It runs on PostgreSQL and on MariaDB, each a pipeline whose only database holds both the
control tables and the sink (for MariaDB: no PostgreSQL at all).
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eo_jobs.pgserver import PgServer
from eo_jobs.protocol.coordinator import Coordinator, Prepared
from eo_jobs.protocol.databases import control_store, kind, participant_store
from eo_jobs.protocol.errors import FencedError
from eo_jobs.protocol.gid import pipeline_prefix
from eo_jobs.protocol.mysql_xa import MySqlPreparedTransactions
from eo_jobs.protocol.recovery import recover
from tests.protocol import harness
from tests.support.mariadb import MariaDbServer

BATCHES = 3


def driver(coord: Coordinator, dsn: str) -> Iterator[str]:
    """One driver over batches 0..BATCHES-1, yielding after each protocol step."""
    for batch in range(BATCHES):
        if coord.begin(harness.QUERY, batch, harness.offsets(batch)) is not None:
            yield f"replay {batch}"
            continue
        yield f"begin {batch}"
        rows = harness.batch_rows(batch)
        prepared: list[Prepared] = []
        for task in range(harness.TASKS):
            prepared.append(harness.prepare_task(coord, dsn, batch, task, rows))
            yield f"prepare {batch}.{task}"
        decided = coord.decide(harness.QUERY, batch, prepared, harness.offsets(batch), 0.0)
        yield f"decide {batch}"
        coord.commit(decided)
        yield f"commit {batch}"


actions = st.lists(
    st.one_of(
        st.tuples(st.just("step"), st.integers(0, 2)),
        st.tuples(st.just("crash"), st.integers(0, 2)),
        st.tuples(st.just("recover"), st.just(0)),
    ),
    max_size=40,
)


@pytest.fixture(scope="module", params=("postgresql", "mariadb"))
def shared_db(request: pytest.FixtureRequest, pg_server: PgServer) -> str:
    if request.param == "mariadb":
        server: MariaDbServer = request.getfixturevalue("mariadb_server")
        return server.create_database("interleavings").dsn
    return pg_server.create_database("interleavings")


MYSQL_TABLES = (
    "eo_fence",
    "eo_decisions",
    "eo_failures",
    "eo_markers",
    "eo_participant_databases",
    "eo_decided_by",
    "eo_database_identity",
    harness.MYSQL_TABLE,
)


def _reset(dsn: str) -> None:
    if kind(dsn) == "mysql":
        store = MySqlPreparedTransactions(dsn)
        try:
            for item in store.in_doubt(pipeline_prefix(harness.PIPELINE)):
                store.rollback(item.gid)
            for table in MYSQL_TABLES:
                store.query(f"DROP TABLE IF EXISTS `{table}`")
        finally:
            store.close()
        harness.create_table(dsn)
        return
    with psycopg.connect(dsn, autocommit=True) as conn:
        for (gid,) in conn.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
        ).fetchall():
            conn.execute(psycopg.sql.SQL("ROLLBACK PREPARED {}").format(psycopg.sql.Literal(gid)))
        conn.execute("DROP SCHEMA IF EXISTS eo CASCADE")
        conn.execute("DROP TABLE IF EXISTS public.ledger")
    harness.create_table(dsn)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(plan=actions)
def test_any_interleaving_of_two_drivers_crashes_and_recoveries_is_exactly_once(
    shared_db: str, plan: list[tuple[str, int]]
) -> None:
    dsn = shared_db
    _reset(dsn)
    epoch = 1
    first = harness.coordinator(dsn, epoch)
    first.startup()
    drivers: list[Iterator[str] | None] = [driver(first, dsn)]
    for action, index in plan:
        if action == "recover":
            epoch += 1
            recover(control_store(dsn), [participant_store(dsn)], harness.PIPELINE, epoch)
            fresh = harness.coordinator(dsn, epoch)
            fresh.startup()
            drivers.append(driver(fresh, dsn))
            continue
        if index >= len(drivers) or drivers[index] is None:
            continue
        if action == "crash":
            drivers[index] = None
            continue
        try:
            next(drivers[index])  # type: ignore[arg-type]
        except (StopIteration, FencedError):
            drivers[index] = None
        assert harness.audit(dsn, range(BATCHES)).duplicates == 0

    epoch += 1
    report = recover(control_store(dsn), [participant_store(dsn)], harness.PIPELINE, epoch)
    assert report.left == 0
    last = harness.coordinator(dsn, epoch + 1)
    last.startup()
    for _ in driver(last, dsn):
        pass
    final = harness.audit(dsn, range(BATCHES))
    assert (final.duplicates, final.missing, final.unexpected, final.prepared_left) == (0, 0, 0, 0)
