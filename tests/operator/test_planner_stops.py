"""Stops the operator starts itself (spec edit, suspend) and retried recoveries are not
crashes: no restart is counted, no driver launched against the user's wish."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

from eo_operator.planner import Kind, Memory, Phase, plan
from tests.operator.test_planner import NOW, _kinds, _obs, _pod, _spec


def test_a_driver_that_exited_after_a_spec_edit_stopped_it_is_not_a_crash() -> None:
    running = Memory(phase=Phase.RUNNING, epoch=1)
    stopping = plan(_obs(running, _pod(spec_hash="old"), annotation=1, spec_hash="new"))
    assert stopping.memory.phase is Phase.STOPPING
    # The driver stopped at a batch boundary and exited 0; the kubelet reports the pod
    # Succeeded before it removes the object, and the pod event wakes the loop in between.
    exited = _pod("Succeeded", spec_hash="old", exit_code=0, deleting_since=NOW)
    waiting = plan(_obs(stopping.memory, exited, annotation=1, spec_hash="new"))
    assert waiting.memory.phase is Phase.STOPPING and waiting.memory.restarts == 0
    assert waiting.actions == [] and waiting.memory.failure is None
    relaunch = plan(_obs(waiting.memory, None, annotation=1, spec_hash="new"))
    assert relaunch.memory.restarts == 0
    assert [a.epoch for a in relaunch.actions if a.kind is Kind.LAUNCH] == [2]


def test_a_driver_that_exited_nonzero_while_stopped_for_a_spec_edit_is_not_a_crash() -> None:
    stopping = Memory(phase=Phase.STOPPING, epoch=1, reason="SpecChanged")
    exited = _pod("Failed", exit_code=143, reason="Error", deleting_since=NOW)
    result = plan(_obs(stopping, exited, annotation=1, spec_hash="new"))
    assert result.memory.restarts == 0 and result.memory.phase is Phase.STOPPING


def test_suspend_with_the_old_driver_stuck_terminating_fences_it_and_launches_nothing() -> None:
    spec = _spec(suspend=True)
    stuck = _pod(deleting_since=NOW - timedelta(seconds=200), grace_seconds=60)
    result = plan(_obs(Memory(phase=Phase.STOPPING, epoch=1), stuck, spec=spec, annotation=1))
    assert _kinds(result)[:2] == [Kind.RECOVER, Kind.FORCE_DELETE_POD]
    assert Kind.LAUNCH not in _kinds(result)
    assert result.memory.restarts == 0
    # Once that recovery finished, the pipeline is suspended and stays so.
    gone = replace(result.memory, recovered_epoch=2)
    after = plan(_obs(gone, None, spec=spec, annotation=2))
    assert after.memory.phase is Phase.SUSPENDED and after.actions == []


def test_a_suspend_whose_recovery_failed_says_it_is_retrying_not_resolved() -> None:
    spec = _spec(suspend=True)
    first = plan(_obs(Memory(phase=Phase.STOPPING, epoch=1), None, spec=spec, annotation=1))
    assert "resolved" not in first.memory.message
    # The reconciler never recorded recoveredEpoch 2: the recovery failed.
    again = plan(_obs(first.memory, None, spec=spec, annotation=2))
    assert [a.epoch for a in again.actions if a.kind is Kind.RECOVER] == [2]
    assert "retrying" in again.memory.message and "resolved" not in again.memory.message
    # A recovery that failed before it could reserve its epoch (Secret missing) is retried too,
    # although recoveredEpoch still matches the old reservation.
    early = replace(first.memory, recovered_epoch=1)
    assert [a.epoch for a in plan(_obs(early, None, spec=spec, annotation=1)).actions] == [2]
    done = plan(_obs(replace(again.memory, recovered_epoch=2), None, spec=spec, annotation=2))
    assert done.actions == [] and "resolved" in done.memory.message


def test_a_lost_driver_is_counted_once_while_its_recovery_is_retried() -> None:
    lost = _pod("Unknown")
    first = plan(_obs(Memory(phase=Phase.RUNNING, epoch=1), lost, annotation=1), random.Random(1))
    assert first.memory.restarts == 1
    # RECOVER failed (sink down): the pod is still there, the next pass plans the same recovery.
    for _ in range(3):
        again = plan(_obs(first.memory, lost, annotation=2), random.Random(1))
        assert _kinds(again)[:3] == [Kind.RECOVER, Kind.FORCE_DELETE_POD, Kind.LAUNCH]
        assert again.memory.restarts == 1
        first = again


def test_a_spec_edit_during_backoff_relaunches_at_once_with_the_count_reset() -> None:
    failed = plan(
        _obs(Memory(phase=Phase.RUNNING, epoch=1), _pod("Failed", exit_code=1), annotation=1),
        random.Random(1),
    )
    assert failed.memory.phase is Phase.BACKOFF and failed.memory.restarts == 1
    edited = plan(_obs(failed.memory, None, annotation=1, generation=2))
    assert Kind.LAUNCH in _kinds(edited)
    assert edited.memory.restarts == 0
