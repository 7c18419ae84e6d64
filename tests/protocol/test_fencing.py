"""Zombies: an older epoch can prepare, but never decide, and its leftovers get swept.

The zombie tests run with the sink in PostgreSQL and in MariaDB (``sink_dsn``) and the control
tables in PostgreSQL and in MariaDB (``control_dsn``): with both in MariaDB, one database holds
everything, a pipeline whose only database is MySQL.
"""

from __future__ import annotations

import pytest

from eo_jobs.protocol.coordinator import Coordinator, Prepared
from eo_jobs.protocol.databases import control_store, participant_store
from eo_jobs.protocol.errors import FencedError, FenceRegressionError
from eo_jobs.protocol.recovery import recover, sweep
from tests.protocol import harness


def _prepare_all(coord: Coordinator, dsn: str, batch: int) -> list[Prepared]:
    rows = harness.batch_rows(batch)
    return [harness.prepare_task(coord, dsn, batch, t, rows) for t in range(harness.TASKS)]


def test_a_zombie_driver_cannot_decide_after_the_fence_is_raised(
    control_dsn: str, sink_dsn: str
) -> None:
    harness.create_table(sink_dsn)
    zombie = harness.coordinator(control_dsn, 1, sink_dsn=sink_dsn)
    zombie.startup()
    assert zombie.begin(harness.QUERY, 0, harness.offsets(0)) is None
    prepared = _prepare_all(zombie, sink_dsn, 0)

    report = recover(control_store(control_dsn), [participant_store(sink_dsn)], harness.PIPELINE, 2)
    assert len(report.rolled_back) == harness.TASKS

    with pytest.raises(FencedError, match="epoch 1 is older than the sink fence 2"):
        zombie.decide(harness.QUERY, 0, prepared, harness.offsets(0), 0.0)
    assert harness.audit(sink_dsn, range(1)).rows == 0

    live = harness.coordinator(control_dsn, 2, sink_dsn=sink_dsn)
    live.startup()
    harness.run_batch(live, sink_dsn, 0)
    final = harness.audit(sink_dsn, range(1))
    assert (final.duplicates, final.missing, final.prepared_left) == (0, 0, 0)


def test_a_zombie_starting_a_batch_is_stopped_before_it_writes(
    control_dsn: str, sink_dsn: str
) -> None:
    harness.create_table(sink_dsn)
    harness.coordinator(control_dsn, 3, sink_dsn=sink_dsn).startup()
    zombie = harness.coordinator(control_dsn, 2, sink_dsn=sink_dsn)
    with pytest.raises(FencedError):
        zombie.begin(harness.QUERY, 0, harness.offsets(0))


def test_the_sweep_rolls_back_zombie_prepares_and_never_touches_the_live_epoch(
    control_dsn: str, sink_dsn: str
) -> None:
    harness.create_table(sink_dsn)
    zombie = harness.coordinator(control_dsn, 1, sink_dsn=sink_dsn)
    zombie.startup()
    live = harness.coordinator(control_dsn, 2, sink_dsn=sink_dsn)
    live.startup()
    assert live.begin(harness.QUERY, 0, harness.offsets(0)) is None
    live_prepared = _prepare_all(live, sink_dsn, 0)
    zombie_rows = harness.batch_rows(1)
    zombie_prepared = [harness.prepare_task(zombie, sink_dsn, 1, 0, zombie_rows)]

    swept = sweep(control_store(control_dsn), [participant_store(sink_dsn)], harness.PIPELINE)
    assert swept.rolled_back == [zombie_prepared[0].gid]
    assert swept.committed == []
    assert {k.gid for k in swept.kept} == {p.gid for p in live_prepared}

    live.commit(live.decide(harness.QUERY, 0, live_prepared, harness.offsets(0), 0.0))
    final = harness.audit(sink_dsn, range(1))
    assert (final.rows, final.duplicates, final.prepared_left) == (harness.ROWS_PER_BATCH, 0, 0)


def test_a_zombie_beginning_a_batch_leaves_the_live_drivers_prepares_alone(
    control_dsn: str, sink_dsn: str
) -> None:
    harness.create_table(sink_dsn)
    zombie = harness.coordinator(control_dsn, 1, sink_dsn=sink_dsn)
    zombie.startup()
    live = harness.coordinator(control_dsn, 2, sink_dsn=sink_dsn)
    live.startup()
    assert live.begin(harness.QUERY, 0, harness.offsets(0)) is None
    prepared = _prepare_all(live, sink_dsn, 0)
    with pytest.raises(FencedError):
        zombie.begin(harness.QUERY, 0, harness.offsets(0))
    live.commit(live.decide(harness.QUERY, 0, prepared, harness.offsets(0), 0.0))
    assert harness.audit(sink_dsn, range(1)).missing == 0


def test_the_fence_never_goes_down(control_dsn: str) -> None:
    control = control_store(control_dsn)
    control.ensure_schema()
    control.raise_fence(harness.PIPELINE, 5)
    assert control.raise_fence(harness.PIPELINE, 5).current == 5
    with pytest.raises(FenceRegressionError, match="from 5 to 4"):
        control.raise_fence(harness.PIPELINE, 4)
    assert control.fence_epoch(harness.PIPELINE) == 5
