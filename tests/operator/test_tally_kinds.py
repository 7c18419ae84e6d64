"""The operator's batch tally reads the decision log of either control database kind.

``BatchTally.read`` asks the store (``timings``, ``failures_after``), so a MySQL-only pipeline
gets the same counters and once-only durations as a PostgreSQL one."""

from __future__ import annotations

import pytest

from eo_jobs.protocol.databases import control_store
from eo_operator.tally import BatchTally

PIPELINE = "ns/tally"


@pytest.fixture(params=("postgresql", "mariadb"))
def dsn(request: pytest.FixtureRequest, pg_dsn: str) -> str:
    if request.param == "postgresql":
        return pg_dsn
    return str(request.getfixturevalue("mariadb_db").dsn)


def test_batches_failures_and_durations_are_counted_once_as_they_appear(dsn: str) -> None:
    control = control_store(dsn)
    control.ensure_schema()
    control.raise_fence(PIPELINE, 1)

    def decide(batch: int) -> None:
        control.decide(
            pipeline=PIPELINE,
            query_id="q",
            batch_id=batch,
            epoch=1,
            participants=[f"g{batch}"],
            source_offsets=None,
            rows_written=1,
            prepare_ms=100.0,
        )

    decide(0)
    control.mark_committed(PIPELINE, "q", 0, 50.0)
    tally = BatchTally()
    first = tally.read(control, PIPELINE)  # takes note of what was there
    assert (first.batches, first.failures, first.commit_seconds) == (0, 0, ())

    decide(1)  # decided, not yet committed: counted, its durations pending
    control.record_failure(PIPELINE, "boom", query_id="q", batch_id=2, epoch=1)
    fresh = tally.read(control, PIPELINE)
    assert (fresh.batches, fresh.failures, fresh.commit_seconds) == (1, 1, ())

    control.mark_committed(PIPELINE, "q", 1, 200.0)
    done = tally.read(control, PIPELINE)
    assert (done.batches, done.failures) == (0, 0)
    assert done.commit_seconds == (0.2,) and done.checkpoint_seconds[0] >= 0.3
    again = tally.read(control, PIPELINE)
    assert (again.batches, again.failures, again.commit_seconds) == (0, 0, ())
    assert (tally.batches, tally.failures) == (1, 1)
    control.close()
