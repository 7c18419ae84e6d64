"""The audit against real decision logs (the protocol driven without Spark), damaged after the
fact: each kind of damage must be named with its batch and check, and an undamaged log must
pass with every check that can run listed as run."""

from __future__ import annotations

import dataclasses
import time

import pytest

from eo_jobs.audit import AuditResult, Check, Position, Status, audit, participants
from eo_jobs.protocol import retention, xa
from eo_jobs.protocol.coordinator import Prepared
from eo_jobs.protocol.gid import pipeline_token, query_token
from tests.audit import harness as h
from tests.protocol import harness as ph

OLDER_QUERY = query_token("0b7e1d2c-0000-4000-8000-00000000a11d")
"""A streaming query of the same pipeline before it started over (a new checkpoint)."""


def _named(result: AuditResult, check: Check) -> list[int | None]:
    return [v.batch for v in result.violations if v.check is check]


def _status(result: AuditResult, check: Check) -> Status:
    return next(c.status for c in result.checks if c.check is check)


def test_an_untampered_log_passes_and_says_which_checks_ran(pg_dsn: str) -> None:
    h.drive(pg_dsn, range(6))
    result = audit(h.target(pg_dsn, batch_column="batch_id"))
    assert result.ok, result.violations
    assert result.batches == 6
    for check in (Check.DECISION_LOG, Check.PARTICIPANTS, Check.ORPHAN_MARKERS,
                  Check.TABLE_COUNT, Check.BATCH_COLUMN, Check.PREPARED):  # fmt: skip
        assert _status(result, check) is Status.RAN, check
    assert _status(result, Check.SOURCE_FILES) is Status.NOT_RUN  # no checkpoint given
    assert result.end.batches == {h.harness_token(): 5}
    assert result.end.table_rows == {ph.SINK: 6 * ph.ROWS_PER_BATCH}


def test_without_the_append_only_declaration_the_count_check_says_it_did_not_run(
    pg_dsn: str,
) -> None:
    h.drive(pg_dsn, range(3))
    h.sql(pg_dsn, "DELETE FROM public.ledger WHERE batch_id = 1")
    result = audit(h.target(pg_dsn, append_only=False))
    assert result.ok  # nothing else can see the loss ...
    count = next(c for c in result.checks if c.check is Check.TABLE_COUNT)
    assert count.status is Status.NOT_RUN and "append-only" in count.detail  # ... and it says so


def test_a_row_deleted_from_the_sink_is_named(pg_dsn: str) -> None:
    h.drive(pg_dsn, range(5))
    first = audit(h.target(pg_dsn, batch_column="batch_id"))
    assert first.ok
    h.sql(pg_dsn, "DELETE FROM public.ledger WHERE id = (SELECT min(id) FROM public.ledger "
                  "WHERE batch_id = 2)")  # fmt: skip
    # The next pass, from the saved position: only the count can see a loss in an audited batch.
    later = audit(h.target(pg_dsn), first.end)
    assert _named(later, Check.TABLE_COUNT) == [4]
    assert "1 fewer" in later.violations[0].evidence and "deleted" in later.violations[0].evidence
    # From the start with the batch column, the batch is named.
    again = audit(h.target(pg_dsn, batch_column="batch_id"))
    assert _named(again, Check.BATCH_COLUMN) == [2]
    assert _named(again, Check.TABLE_COUNT) == [4]


def test_a_row_inserted_twice_is_named(pg_dsn: str) -> None:
    h.drive(pg_dsn, range(4))
    h.sql(pg_dsn, "INSERT INTO public.ledger SELECT * FROM public.ledger WHERE batch_id = 3 "
                  "LIMIT 1")  # fmt: skip
    result = audit(h.target(pg_dsn, batch_column="batch_id"))
    assert _named(result, Check.BATCH_COLUMN) == [3]
    count = [v for v in result.violations if v.check is Check.TABLE_COUNT]
    assert len(count) == 1 and "1 more" in count[0].evidence


def _decide_without_phase_two(dsn: str, coord: object, batch_id: int) -> None:
    """Batch N decided, its participants left prepared (the driver died after the decision)."""
    from eo_jobs.protocol.coordinator import Coordinator

    assert isinstance(coord, Coordinator)
    assert coord.begin(ph.QUERY, batch_id, h.kafka(batch_id)) is None
    rows = ph.batch_rows(batch_id)
    prepared: list[Prepared] = [
        ph.prepare_task(coord, dsn, batch_id, task, rows) for task in range(ph.TASKS)
    ]
    coord.decide(ph.QUERY, batch_id, prepared, h.kafka(batch_id), 1.0)


def test_a_participant_left_prepared_after_its_decision_is_named_past_the_bound(
    pg_dsn: str,
) -> None:
    coord = h.drive(pg_dsn, range(3))
    _decide_without_phase_two(pg_dsn, coord, 3)
    within = audit(h.target(pg_dsn))
    assert within.ok, "inside the bound it is phase 2 at work, not a violation"
    assert within.end.batches[h.harness_token()] == 2, "the position waits for batch 3"
    assert within.pending and "3" in within.pending[0]
    late = audit(h.target(pg_dsn, prepared_bound=0.0), within.end)
    assert _named(late, Check.PREPARED) == [3, 3, 3]  # one per writer task
    assert "still prepared" in late.violations[0].evidence
    # Recovery (a new epoch) commits it; the next pass finds batch 3 whole and the count right.
    _started(pg_dsn, 2)
    done = audit(h.target(pg_dsn), within.end)
    assert done.ok, done.violations
    assert done.end.batches[h.harness_token()] == 3
    assert _status(done, Check.TABLE_COUNT) is Status.RAN


def test_a_participant_rolled_back_against_its_decision_is_a_loss(pg_dsn: str) -> None:
    coord = h.drive(pg_dsn, range(2))
    _decide_without_phase_two(pg_dsn, coord, 2)
    gid = h.sql(pg_dsn, "SELECT participants[1] FROM eo.decisions WHERE batch_id = 2")[0][0]
    h.sql(pg_dsn, f"ROLLBACK PREPARED '{gid}'")
    result = audit(h.target(pg_dsn))
    assert _named(result, Check.PARTICIPANTS) == [2]
    assert gid in result.violations[0].evidence and "rolled back" in result.violations[0].evidence
    _started(pg_dsn, 2)  # gids are unique server-wide: leave nothing prepared for other tests


def test_a_deleted_decision_is_named_by_the_log_the_offsets_and_its_markers(pg_dsn: str) -> None:
    h.drive(pg_dsn, range(5))
    h.sql(pg_dsn, "DELETE FROM eo.decisions WHERE batch_id = 2")
    result = audit(h.target(pg_dsn))
    assert _named(result, Check.DECISION_LOG) == [2]
    assert _named(result, Check.SOURCE_COVERAGE) == [3]  # batch 3's range starts nowhere
    assert _named(result, Check.ORPHAN_MARKERS) == [2]
    assert (
        "no decision"
        in next(v for v in result.violations if v.check is Check.ORPHAN_MARKERS).evidence
    )


def test_the_last_decision_deleted_leaves_orphan_markers(pg_dsn: str) -> None:
    h.drive(pg_dsn, range(4))
    first = audit(h.target(pg_dsn))
    h.drive(pg_dsn, range(4, 6), coord=ph.coordinator(pg_dsn, 1))
    h.sql(pg_dsn, "DELETE FROM eo.decisions WHERE batch_id = 5")
    result = audit(h.target(pg_dsn), first.end)
    assert _named(result, Check.ORPHAN_MARKERS) == [5]
    assert result.ok is False


def test_a_decision_audited_before_and_deleted_since_is_named(pg_dsn: str) -> None:
    h.drive(pg_dsn, range(3))
    first = audit(h.target(pg_dsn))
    h.drive(pg_dsn, range(3, 5), coord=ph.coordinator(pg_dsn, 1))
    h.sql(pg_dsn, "DELETE FROM eo.decisions WHERE batch_id = 2")
    result = audit(h.target(pg_dsn), first.end)
    assert 2 in _named(result, Check.DECISION_LOG)


def test_a_gap_in_kafka_offsets_is_named(pg_dsn: str) -> None:
    h.drive(pg_dsn, range(5))
    h.sql(pg_dsn, "UPDATE eo.decisions SET source_offsets = source_offsets #- '{0,orders,1}' "
                  "WHERE batch_id = 3")  # fmt: skip
    result = audit(h.target(pg_dsn))
    assert _named(result, Check.SOURCE_COVERAGE) == [3]
    evidence = result.violations[0].evidence
    assert evidence.startswith("gap") and "orders-1" in evidence and "120" in evidence


def test_an_overlap_in_kafka_offsets_is_named(pg_dsn: str) -> None:
    h.drive(pg_dsn, range(5))
    h.sql(pg_dsn, "UPDATE eo.decisions SET source_offsets = "
                  "jsonb_set(source_offsets, '{0,orders,0}', '50') WHERE batch_id = 3")  # fmt: skip
    result = audit(h.target(pg_dsn))
    assert _named(result, Check.SOURCE_COVERAGE) == [3]
    evidence = result.violations[0].evidence
    assert evidence.startswith("overlap") and "orders-0" in evidence and "50..59" in evidence


def test_an_epoch_going_down_is_named(pg_dsn: str) -> None:
    h.drive(pg_dsn, range(2), epoch=1)
    h.drive(pg_dsn, range(2, 4), coord=_started(pg_dsn, 3))
    h.sql(pg_dsn, "UPDATE eo.decisions SET epoch = 2 WHERE batch_id = 3")
    result = audit(h.target(pg_dsn))
    log = [v for v in result.violations if v.check is Check.DECISION_LOG]
    assert {v.batch for v in log} == {3}
    assert sum("epoch went down" in v.evidence for v in log) == 1
    assert sum("batch 3 epoch 3" in v.evidence for v in log) == ph.TASKS  # its gids say epoch 3


def _started(dsn: str, epoch: int):  # type: ignore[no-untyped-def]
    coord = ph.coordinator(dsn, epoch)
    coord.startup()
    return coord


def test_passes_go_on_from_the_position_and_catch_later_damage(pg_dsn: str) -> None:
    coord = h.drive(pg_dsn, range(4))
    first = audit(h.target(pg_dsn))
    h.drive(pg_dsn, range(4, 7), coord=coord)
    second = audit(h.target(pg_dsn), first.end)
    assert second.ok and second.batches == 3
    assert second.end.table_rows == {ph.SINK: 7 * ph.ROWS_PER_BATCH}
    h.drive(pg_dsn, range(7, 8), coord=coord)
    h.sql(pg_dsn, "DELETE FROM public.ledger WHERE batch_id = 7 AND id % 2 = 0")
    third = audit(h.target(pg_dsn, batch_column="batch_id"), second.end)
    assert _named(third, Check.BATCH_COLUMN) == [7]
    assert _named(third, Check.TABLE_COUNT) == [7]


def test_a_pass_is_bounded_and_the_rest_waits_for_the_next(pg_dsn: str) -> None:
    h.drive(pg_dsn, range(6))
    first = audit(h.target(pg_dsn), max_batches=4)
    assert first.ok and first.batches == 4
    assert first.end.batches == {h.harness_token(): 3}
    rest = audit(h.target(pg_dsn), first.end, max_batches=4)
    assert rest.ok and rest.batches == 2


def test_markers_pruned_past_the_position_make_the_checks_say_so(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.drive(pg_dsn, range(6))
    first = audit(h.target(pg_dsn), max_batches=2)
    assert first.end.batches == {h.harness_token(): 1}
    monkeypatch.setattr(retention, "MARKER_RETENTION_BATCHES", 2)
    monkeypatch.setattr(xa, "MARKER_RETENTION_SECONDS", 0.0)
    monkeypatch.setattr(participants, "PRUNABLE_AFTER_SECONDS", -1.0)  # as if a day had passed
    time.sleep(0.01)
    pruned = xa.PreparedTransactions(pg_dsn).prune_markers(ph.PIPELINE, 6)  # batches 0..3
    assert pruned == 4 * ph.TASKS
    later = audit(h.target(pg_dsn), first.end)
    assert later.ok
    assert _status(later, Check.PARTICIPANTS) is Status.PARTIAL
    count = next(c for c in later.checks if c.check is Check.TABLE_COUNT)
    assert count.status is Status.NOT_RUN and "pruned through batch 3" in count.detail
    # The baseline is carried: the pass after that checks the count again.
    assert audit(h.target(pg_dsn), later.end).ok
    assert _status(audit(h.target(pg_dsn), later.end), Check.TABLE_COUNT) is Status.RAN


def test_the_position_round_trips_through_json(pg_dsn: str) -> None:
    h.drive(pg_dsn, range(2))
    result = audit(h.target(pg_dsn))
    assert Position.from_json(result.end.as_json()) == result.end


def test_at_least_once_batches_are_not_counted_and_say_why(pg_dsn: str) -> None:
    """Without two-phase commit the tasks commit their rows with no marker: the count and the
    participants cannot be checked, and the audit says so instead of reporting a loss."""
    ph.create_table(pg_dsn)
    coord = _started(pg_dsn, 1)
    for batch_id in range(3):
        assert coord.begin(ph.QUERY, batch_id, h.kafka(batch_id)) is None
        rows = ph.batch_rows(batch_id)
        count = ph.writer(pg_dsn).write(rows, gid=None, pipeline=ph.PIPELINE, batch_id=batch_id)
        coord.record(ph.QUERY, batch_id, [Prepared(ph.SINK, "-", count)], h.kafka(batch_id), 1.0)
    result = audit(h.target(pg_dsn))
    assert result.ok, result.violations
    assert _status(result, Check.PARTICIPANTS) is Status.PARTIAL
    count_run = next(c for c in result.checks if c.check is Check.TABLE_COUNT)
    assert count_run.status is Status.NOT_RUN and "without participants" in count_run.detail


def test_a_recent_loss_below_an_older_querys_prune_horizon_is_still_a_loss(pg_dsn: str) -> None:
    """A query that started over has its batch ids below an older query's prune horizon, which
    says nothing of them (horizons are kept per query)."""
    coord = h.drive(pg_dsn, range(2))
    h.sql(
        pg_dsn,
        "INSERT INTO eo.markers (gid, pipeline, batch_id, rows_written) VALUES (%s, %s, 50000, 0)",
        (xa.horizon_gid(pipeline_token(ph.PIPELINE), OLDER_QUERY), ph.PIPELINE),
    )
    _decide_without_phase_two(pg_dsn, coord, 2)
    gid = h.sql(pg_dsn, "SELECT participants[2] FROM eo.decisions WHERE batch_id = 2")[0][0]
    h.sql(pg_dsn, f"ROLLBACK PREPARED '{gid}'")
    result = audit(h.target(pg_dsn))
    assert _named(result, Check.PARTICIPANTS) == [2]
    assert gid in result.violations[0].evidence
    _started(pg_dsn, 2)  # gids are unique server-wide: leave nothing prepared for other tests


def test_the_count_runs_below_an_older_querys_prune_horizon_for_recent_batches(
    pg_dsn: str,
) -> None:
    coord = h.drive(pg_dsn, range(3))
    first = audit(h.target(pg_dsn))
    h.sql(
        pg_dsn,
        "INSERT INTO eo.markers (gid, pipeline, batch_id, rows_written) VALUES (%s, %s, 50000, 0)",
        (xa.horizon_gid(pipeline_token(ph.PIPELINE), OLDER_QUERY), ph.PIPELINE),
    )
    h.drive(pg_dsn, range(3, 5), coord=coord)
    h.sql(pg_dsn, "DELETE FROM public.ledger WHERE batch_id = 4 AND id % 7 = 0")
    later = audit(h.target(pg_dsn), first.end)
    assert _status(later, Check.TABLE_COUNT) is Status.RAN
    assert _named(later, Check.TABLE_COUNT) == [4]


def test_a_sink_database_that_cannot_be_read_is_not_run_and_keeps_the_position(
    pg_dsn: str,
) -> None:
    h.drive(pg_dsn, range(3))
    good = h.target(pg_dsn)
    down = "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2"
    sink = dataclasses.replace(good.sinks[0], dsn=down)
    result = audit(dataclasses.replace(good, sinks=(sink,), dead_letter_dsn=pg_dsn))
    not_run = {(c.check, c.subject) for c in result.checks if c.status is Status.NOT_RUN}
    assert (Check.PARTICIPANTS, ph.SINK) in not_run and (Check.TABLE_COUNT, ph.SINK) in not_run
    assert _status(result, Check.PARTICIPANTS) is Status.NOT_RUN
    assert result.end == result.start and "position kept" in result.pending[-1]
