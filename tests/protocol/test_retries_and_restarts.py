"""Task retries pick one winner; prepared transactions survive a PostgreSQL crash."""

from __future__ import annotations

import pytest

from eo_jobs.pgserver import temporary_server
from eo_jobs.protocol.control import ControlStore
from eo_jobs.protocol.errors import CheckpointMismatchError, CheckpointResetError
from eo_jobs.protocol.recovery import recover
from eo_jobs.protocol.xa import PreparedTransactions
from tests.protocol import harness


def test_of_two_attempts_of_one_task_exactly_one_wins(pg_dsn: str) -> None:
    harness.create_table(pg_dsn)
    coord = harness.coordinator(pg_dsn, 1)
    coord.startup()
    assert coord.begin(harness.QUERY, 0, harness.offsets(0)) is None
    rows = harness.batch_rows(0)
    lost = harness.prepare_task(coord, pg_dsn, 0, 0, rows, attempt=0)
    retried = harness.prepare_task(coord, pg_dsn, 0, 0, rows, attempt=1)
    others = [harness.prepare_task(coord, pg_dsn, 0, t, rows) for t in (1, 2)]
    # Spark reports only the successful attempt of task 0; the lost one is still prepared.
    result = coord.decide_and_commit(harness.QUERY, 0, [retried, *others], harness.offsets(0), 0.0)
    assert result.rolled_back_losers == 1
    audit = harness.audit(pg_dsn, range(1))
    assert (audit.duplicates, audit.missing, audit.prepared_left) == (0, 0, 0)
    assert lost.gid != retried.gid


def test_when_both_attempts_are_reported_the_lower_attempt_wins(pg_dsn: str) -> None:
    harness.create_table(pg_dsn)
    coord = harness.coordinator(pg_dsn, 1)
    coord.startup()
    coord.begin(harness.QUERY, 0, harness.offsets(0))
    rows = harness.batch_rows(0)
    attempts = [harness.prepare_task(coord, pg_dsn, 0, 0, rows, attempt=a) for a in (0, 1)]
    others = [harness.prepare_task(coord, pg_dsn, 0, t, rows) for t in (1, 2)]
    decided = coord.decide(harness.QUERY, 0, [*attempts, *others], harness.offsets(0), 0.0)
    assert attempts[0] in decided.winners and attempts[1] not in decided.winners
    coord.commit(decided)
    assert harness.audit(pg_dsn, range(1)).duplicates == 0


def test_a_participant_prepared_for_another_batch_is_never_decided(pg_dsn: str) -> None:
    harness.create_table(pg_dsn)
    coord = harness.coordinator(pg_dsn, 1)
    coord.startup()
    coord.begin(harness.QUERY, 1, harness.offsets(1))
    stray = harness.prepare_task(coord, pg_dsn, 0, 0, harness.batch_rows(0))
    own = [harness.prepare_task(coord, pg_dsn, 1, t, harness.batch_rows(1)) for t in (1, 2)]

    with pytest.raises(ValueError, match=r"of batch 0 in batch 1"):
        coord.decide(harness.QUERY, 1, [stray, *own], harness.offsets(1), 0.0)

    assert ControlStore(pg_dsn).decision(harness.PIPELINE, harness.QUERY, 1) is None
    assert coord.abandon(0) + coord.abandon(1) == 3  # gids are cluster-wide: leave none behind


def test_writer_tasks_preparing_in_parallel_commit_exactly_once(pg_dsn: str) -> None:
    harness.create_table(pg_dsn)
    coord = harness.coordinator(pg_dsn, 1)
    coord.startup()
    for batch in range(4):
        harness.run_parallel_batch(coord, pg_dsn, batch)
    audit = harness.audit(pg_dsn, range(4))
    assert (audit.rows, audit.duplicates, audit.prepared_left) == (4 * 60, 0, 0)


def test_prepared_transactions_survive_a_postgres_crash_and_recovery_resolves_them() -> None:
    with temporary_server() as server:
        dsn = server.create_database("ledger")
        harness.create_table(dsn)
        code = harness.run_in_child(dsn, 1, [0, 1, 2], "after-decision", fault_batch=1)
        assert code == -9
        server.restart(mode="immediate")
        assert harness.audit(dsn, range(3)).prepared_left == harness.TASKS
        report = recover(ControlStore(dsn), [PreparedTransactions(dsn)], harness.PIPELINE, 2)
        assert len(report.committed) == harness.TASKS and report.left == 0
        harness.run_in_child(dsn, 2, [0, 1, 2], None)
        audit = harness.audit(dsn, range(3))
        assert (audit.duplicates, audit.missing, audit.prepared_left) == (0, 0, 0)


def test_a_new_query_id_over_old_decisions_is_a_checkpoint_reset(pg_dsn: str) -> None:
    harness.create_table(pg_dsn)
    coord = harness.coordinator(pg_dsn, 1)
    coord.startup()
    harness.run_batch(coord, pg_dsn, 0)
    with pytest.raises(CheckpointResetError, match="checkpoint reset detected"):
        coord.begin("11111111-2222-3333-4444-555555555555", 0, harness.offsets(0))


def test_a_decided_batch_replayed_with_other_offsets_is_refused(pg_dsn: str) -> None:
    harness.create_table(pg_dsn)
    coord = harness.coordinator(pg_dsn, 1)
    coord.startup()
    harness.run_batch(coord, pg_dsn, 0)
    with pytest.raises(CheckpointMismatchError, match="decided with source offsets"):
        coord.begin(harness.QUERY, 0, {"start": 0, "end": 999})


def test_a_participant_committed_by_someone_else_is_verified_by_its_marker(pg_dsn: str) -> None:
    harness.create_table(pg_dsn)
    coord = harness.coordinator(pg_dsn, 1)
    coord.startup()
    coord.begin(harness.QUERY, 0, harness.offsets(0))
    rows = harness.batch_rows(0)
    prepared = [harness.prepare_task(coord, pg_dsn, 0, t, rows) for t in range(3)]
    decided = coord.decide(harness.QUERY, 0, prepared, harness.offsets(0), 0.0)
    other = PreparedTransactions(pg_dsn)
    assert other.commit(prepared[0].gid) == "committed"
    assert other.commit(prepared[0].gid) == "already-committed"
    coord.commit(decided)
    assert other.rollback("eo1:x-00000000:0:s-00000000:1:0:0:0") == "already-rolled-back"
    assert harness.audit(pg_dsn, range(1)).duplicates == 0


def test_the_last_batch_result_reports_rows_per_sink(pg_dsn: str) -> None:
    harness.create_table(pg_dsn)
    coord = harness.coordinator(pg_dsn, 1)
    coord.startup()
    result = harness.run_batch(coord, pg_dsn, 0)
    assert result.rows_by_sink == {harness.SINK: harness.ROWS_PER_BATCH}
    assert not result.replayed and result.rolled_back_losers == 0
