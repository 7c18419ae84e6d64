"""Stragglers: a participant prepared after its batch was decided without it is rolled back."""

from __future__ import annotations

from eo_jobs.protocol.xa import PreparedTransactions
from tests.protocol import harness


def test_only_participants_their_decided_batch_does_not_name_are_rolled_back(
    pg_dsn: str,
) -> None:
    harness.create_table(pg_dsn)
    coord = harness.coordinator(pg_dsn, 2)
    coord.startup()
    harness.run_batch(coord, pg_dsn, 0)
    rows = harness.batch_rows(0)
    # Batch 1 in flight: prepared, not decided yet (its begin() cleared what was there).
    assert coord.begin(harness.QUERY, 1, harness.offsets(1)) is None
    in_flight = harness.prepare_task(coord, pg_dsn, 1, 0, harness.batch_rows(1)).gid
    # A writer-task attempt of batch 0 that PREPAREd after phase 2 rolled back the losers.
    straggler = harness.prepare_task(coord, pg_dsn, 0, 1, rows, attempt=97).gid
    # A newer driver's participant of batch 0 (this driver would be its zombie).
    newer = harness.coordinator(pg_dsn, 3)
    later = harness.prepare_task(newer, pg_dsn, 0, 2, rows, attempt=98).gid

    reaper = coord.with_own_connections()
    try:
        assert reaper.roll_back_stragglers(harness.QUERY) == [straggler]
        assert reaper.roll_back_stragglers(harness.QUERY) == []
    finally:
        reaper.close()

    left = {x.gid for x in PreparedTransactions(pg_dsn).in_doubt("eo1:")}
    assert left == {in_flight, later}
    audit = harness.audit(pg_dsn, range(1))
    assert (audit.rows, audit.duplicates, audit.missing) == (harness.ROWS_PER_BATCH, 0, 0)
