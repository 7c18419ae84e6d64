"""A MariaDB sink under the protocol: mixed with a PostgreSQL sink under one decision per
batch, and surviving a crash of the MariaDB server with branches prepared.

The control tables are in PostgreSQL (``pg_dsn``). The SIGKILL crash-point suite and the zombie
tests run with a MariaDB sink in ``test_crash_points`` and ``test_fencing``.
"""

from __future__ import annotations

import psycopg
import pytest

from eo_jobs.protocol.control import ControlStore
from eo_jobs.protocol.coordinator import Coordinator, Prepared
from eo_jobs.protocol.databases import participant_store
from eo_jobs.protocol.faults import InjectedFaultError, crash_point
from eo_jobs.protocol.gid import sink_token
from eo_jobs.protocol.recovery import recover
from tests.protocol import harness
from tests.protocol.test_crash_points import EXPECTED
from tests.support.mariadb import MariaDbDatabase

MIRROR = "mirror"
"""The second sink, in MariaDB; ``harness.SINK`` is in PostgreSQL."""


def mixed(pg_dsn: str, my_dsn: str, epoch: int) -> Coordinator:
    return Coordinator(
        harness.PIPELINE,
        epoch,
        ControlStore(pg_dsn),
        {harness.SINK: participant_store(pg_dsn), MIRROR: participant_store(my_dsn)},
    )


def run_mixed_batch(coord: Coordinator, dsns: dict[str, str], batch_id: int) -> None:
    """One batch writing the same rows into both sinks, every task of each, then one decision."""
    if coord.begin(harness.QUERY, batch_id, harness.offsets(batch_id)) is not None:
        return
    rows = harness.batch_rows(batch_id)
    prepared: list[Prepared] = []
    for sink, dsn in dsns.items():
        for task in range(harness.TASKS):
            gid = coord.gid(harness.QUERY, sink, batch_id, task, 0)
            share = [r for r in rows if r[0] % harness.TASKS == task]
            count = harness.writer(dsn).write(
                share, gid=gid, pipeline=coord.pipeline, batch_id=batch_id
            )
            prepared.append(Prepared(sink, gid, count))
            crash_point("after-some-prepared", batch_id)
    coord.decide_and_commit(harness.QUERY, batch_id, prepared, harness.offsets(batch_id), 0.0)


# crash point -> prepared left (PostgreSQL, MariaDB), recovery commits, recovery rolls back
MIXED = {
    "before-prepare": ((0, 0), 0, 0),
    "after-some-prepared": ((1, 0), 0, 1),
    "before-decision": ((3, 3), 0, 6),
    "after-decision": ((3, 3), 6, 0),
    "after-some-commits": ((2, 3), 5, 0),  # winners commit PostgreSQL's task 0 first
    "after-commits": ((0, 0), 0, 0),
}
assert set(MIXED) == set(EXPECTED)


@pytest.mark.parametrize("point", list(MIXED))
def test_a_postgresql_and_a_mariadb_sink_show_a_batch_together_after_a_crash_at_any_point(
    pg_dsn: str, mariadb_db: MariaDbDatabase, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    """The driver fails at the crash point of batch 1 (an injected error stands in for the
    SIGKILL the single-sink suite uses); recovery at epoch 2 resolves both databases from the
    one decision, and the replay leaves each sink with every row exactly once."""
    dsns = {harness.SINK: pg_dsn, MIRROR: mariadb_db.dsn}
    for dsn in dsns.values():
        harness.create_table(dsn)
    monkeypatch.setenv("EO_FAULT_POINT", point)
    monkeypatch.setenv("EO_FAULT_BATCH", "1")
    monkeypatch.setenv("EO_FAULT_ACTION", "raise")
    first = mixed(pg_dsn, mariadb_db.dsn, 1)
    first.startup()
    run_mixed_batch(first, dsns, 0)
    with pytest.raises(InjectedFaultError):
        run_mixed_batch(first, dsns, 1)
    first.close()
    for name in ("EO_FAULT_POINT", "EO_FAULT_BATCH", "EO_FAULT_ACTION"):
        monkeypatch.delenv(name)

    left, commits, rollbacks = MIXED[point]
    pg_left = harness.audit(pg_dsn, range(3)).prepared_left
    my_left = harness.audit(mariadb_db.dsn, range(3)).prepared_left
    assert (pg_left, my_left) == left
    second = mixed(pg_dsn, mariadb_db.dsn, 2)
    report = second.startup()
    assert (len(report.committed), len(report.rolled_back), report.left) == (
        commits,
        rollbacks,
        0,
    )
    for batch in range(3):
        run_mixed_batch(second, dsns, batch)
    for dsn in dsns.values():
        final = harness.audit(dsn, range(3))
        assert (final.duplicates, final.missing, final.unexpected, final.prepared_left) == (
            0,
            0,
            0,
            0,
        )
        assert final.rows == 3 * harness.ROWS_PER_BATCH
    decision = second.control.decision(harness.PIPELINE, harness.QUERY, 1)
    assert decision is not None
    sinks = sorted(p.split(":")[3] for p in decision.participants)  # one decision, both sinks
    assert sinks == sorted([sink_token(harness.SINK), sink_token(MIRROR)] * harness.TASKS)


@pytest.mark.parametrize(
    ("point", "commits", "rollbacks"), [("before-decision", 0, 3), ("after-decision", 3, 0)]
)
def test_prepared_branches_survive_a_mariadb_crash_and_are_resolved_by_the_decision_log(
    pg_dsn: str, mariadb_db: MariaDbDatabase, point: str, commits: int, rollbacks: int
) -> None:
    sink = mariadb_db.dsn
    harness.create_table(sink)
    code = harness.run_in_child(pg_dsn, 1, [0, 1], fault=point, fault_batch=1, sink_dsn=sink)
    assert code == -9
    assert harness.audit(sink, range(2)).prepared_left == harness.TASKS

    mariadb_db.server.restart(crash=True)
    assert harness.audit(sink, range(2)).prepared_left == harness.TASKS

    report = recover(ControlStore(pg_dsn), [participant_store(sink)], harness.PIPELINE, 2)
    assert (len(report.committed), len(report.rolled_back), report.left) == (
        commits,
        rollbacks,
        0,
    )
    assert harness.run_in_child(pg_dsn, 2, [0, 1, 2], fault=None, sink_dsn=sink) == 0
    final = harness.audit(sink, range(3))
    assert (final.rows, final.duplicates, final.missing, final.prepared_left) == (
        3 * harness.ROWS_PER_BATCH,
        0,
        0,
        0,
    )
    with psycopg.connect(pg_dsn) as conn:
        decided = conn.execute("SELECT count(*) FROM eo.decisions").fetchone()
    assert decided == (3,)
