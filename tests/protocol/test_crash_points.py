"""Every crash point of the protocol brief, with a real SIGKILL of a real driver process.

Each test: a driver (child process, epoch 1) runs batches 0-2 and kills itself at the crash
point in batch 1; recovery fences to epoch 2 and resolves what was left; a new driver replays
batches 0-2. The table must then hold every source row exactly once, with nothing prepared.
Each runs with the sink in PostgreSQL and in MariaDB (XA branches): ``sink_dsn``, and the control
tables in PostgreSQL and in MariaDB: ``control_dsn`` (both MariaDB: one MySQL database holds the
control tables and the sink, no PostgreSQL involved).
"""

from __future__ import annotations

import pytest

from eo_jobs.protocol.databases import control_store, participant_store
from eo_jobs.protocol.recovery import recover
from tests.protocol import harness

# crash point -> (prepared left behind, of which recovery commits, of which it rolls back)
EXPECTED = {
    "before-prepare": (0, 0, 0),
    "after-some-prepared": (1, 0, 1),
    "before-decision": (3, 0, 3),
    "after-decision": (3, 3, 0),
    "after-some-commits": (2, 2, 0),
    "after-commits": (0, 0, 0),
}


@pytest.mark.parametrize("point", list(EXPECTED))
def test_a_driver_killed_at_a_crash_point_loses_and_duplicates_nothing(
    control_dsn: str, sink_dsn: str, point: str
) -> None:
    harness.create_table(sink_dsn)
    code = harness.run_in_child(
        control_dsn, epoch=1, batches=[0, 1, 2], fault=point, fault_batch=1, sink_dsn=sink_dsn
    )
    assert code == -9, "the driver should have been killed at the crash point"

    before = harness.audit(sink_dsn, range(0, 3))
    left, to_commit, to_roll_back = EXPECTED[point]
    assert before.prepared_left == left

    report = recover(
        control_store(control_dsn), [participant_store(sink_dsn)], harness.PIPELINE, epoch=2
    )
    assert (len(report.committed), len(report.rolled_back), report.left) == (
        to_commit,
        to_roll_back,
        0,
    )
    assert report.fence_from == 1 and report.fence_to == 2

    assert (
        harness.run_in_child(control_dsn, epoch=2, batches=[0, 1, 2], fault=None, sink_dsn=sink_dsn)
        == 0
    )
    after = harness.audit(sink_dsn, range(0, 3))
    assert (after.duplicates, after.missing, after.unexpected, after.prepared_left) == (0, 0, 0, 0)
    assert after.rows == 3 * harness.ROWS_PER_BATCH


def test_a_replayed_decided_batch_writes_nothing(control_dsn: str, sink_dsn: str) -> None:
    harness.create_table(sink_dsn)
    coord = harness.coordinator(control_dsn, 1, sink_dsn=sink_dsn)
    coord.startup()
    first = harness.run_batch(coord, sink_dsn, 0)
    again = harness.run_batch(coord, sink_dsn, 0)
    assert not first.replayed and again.replayed
    assert harness.audit(sink_dsn, range(1)).rows == harness.ROWS_PER_BATCH


def test_recovery_twice_is_the_same_as_once(control_dsn: str, sink_dsn: str) -> None:
    harness.create_table(sink_dsn)
    harness.run_in_child(
        control_dsn, 1, [0, 1], fault="after-decision", fault_batch=1, sink_dsn=sink_dsn
    )
    stores = [participant_store(sink_dsn)]
    first = recover(control_store(control_dsn), stores, harness.PIPELINE, 2)
    second = recover(control_store(control_dsn), stores, harness.PIPELINE, 2)
    assert len(first.committed) == 3
    assert (second.committed, second.rolled_back, second.left) == ([], [], 0)
    assert harness.audit(sink_dsn, range(2)).missing == 0
