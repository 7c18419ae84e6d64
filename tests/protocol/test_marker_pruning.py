"""Pruned markers: kept a while, and a late finisher of a pruned batch claims no data loss."""

from __future__ import annotations

import psycopg
import pytest

from eo_jobs.protocol.control import MARKER_RETENTION_BATCHES
from eo_jobs.protocol.errors import LostParticipantError
from eo_jobs.protocol.xa import PreparedTransactions
from tests.protocol import harness


def _age_markers(dsn: str, batch_id: int, days: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE eo.markers SET created_at = created_at - make_interval(days => %s) "
            "WHERE batch_id = %s",
            (days, batch_id),
        )


def _markers(dsn: str, batch_id: int) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM eo.markers WHERE batch_id = %s AND gid LIKE 'eo1:%%'",
            (batch_id,),
        ).fetchone()
    return int(row[0]) if row else -1


def test_a_late_finisher_of_a_batch_whose_markers_were_pruned_is_told_so_not_data_loss(
    pg_dsn: str,
) -> None:
    harness.create_table(pg_dsn)
    coord = harness.coordinator(pg_dsn, 1)
    coord.startup()
    for batch in range(2):
        harness.run_batch(coord, pg_dsn, batch)
    decision = coord.control.decision(harness.PIPELINE, harness.QUERY, 0)
    assert decision is not None
    _age_markers(pg_dsn, 0, days=2)  # batch 0 long ago, batch 1 just now
    store = coord.stores[harness.SINK]
    far = 1 + MARKER_RETENTION_BATCHES + 1

    assert store.prune_markers(harness.PIPELINE, far) == harness.TASKS
    assert (_markers(pg_dsn, 0), _markers(pg_dsn, 1)) == (0, harness.TASKS)  # young ones stay

    # A zombie frozen since batch 0 resumes its phase 2 through its own connection.
    late = PreparedTransactions(pg_dsn)
    try:
        outcomes = {late.commit(gid).value for gid in decision.participants}
    finally:
        late.close()
    assert outcomes == {"marker-pruned"}
    assert harness.audit(pg_dsn, range(2)).rows == 2 * harness.ROWS_PER_BATCH


def test_a_decided_participant_rolled_back_above_the_prune_horizon_is_still_a_lost_participant(
    pg_dsn: str,
) -> None:
    harness.create_table(pg_dsn)
    coord = harness.coordinator(pg_dsn, 1)
    coord.startup()
    harness.run_batch(coord, pg_dsn, 0)
    _age_markers(pg_dsn, 0, days=2)
    store = coord.stores[harness.SINK]
    assert store.prune_markers(harness.PIPELINE, MARKER_RETENTION_BATCHES + 1) == harness.TASKS
    # Batch 1 prepared, then rolled back by hand against a decision naming it.
    assert coord.begin(harness.QUERY, 1, harness.offsets(1)) is None
    gid = harness.prepare_task(coord, pg_dsn, 1, 0, harness.batch_rows(1)).gid
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("ROLLBACK PREPARED {}").format(psycopg.sql.Literal(gid)))
    with pytest.raises(LostParticipantError):
        store.commit(gid)


def test_a_lost_participant_of_a_query_that_started_over_is_not_taken_for_a_pruned_one(
    pg_dsn: str,
) -> None:
    """Batch ids start again at 0 when a streaming query starts over (a new checkpoint): the
    old query's prune horizon says nothing of the new query's batches."""
    harness.create_table(pg_dsn)
    coord = harness.coordinator(pg_dsn, 1)
    coord.startup()
    harness.run_batch(coord, pg_dsn, 0)
    _age_markers(pg_dsn, 0, days=2)
    store = coord.stores[harness.SINK]
    assert store.prune_markers(harness.PIPELINE, MARKER_RETENTION_BATCHES + 1) == harness.TASKS
    # The new query's batch 0: decided, then its participant rolled back by hand (never here).
    lost = coord.gid("9d8c7b6a-0000-4000-8000-000000000000", harness.SINK, 0, 0, 0)
    with pytest.raises(LostParticipantError):
        store.commit(lost)
    # The old query's own pruned participants still read as pruned.
    old = coord.control.decision(harness.PIPELINE, harness.QUERY, 0)
    assert old is not None
    assert {store.commit(gid).value for gid in old.participants} == {"marker-pruned"}
