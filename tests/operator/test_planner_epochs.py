"""The planner never hands one epoch to two drivers."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from eo_jobs.protocol.errors import EXIT_FENCED
from eo_operator.planner import Kind, Memory, Phase, plan
from tests.operator.test_planner import _obs, _pod, _spec


def test_a_lost_driver_whose_epoch_status_never_recorded_gets_a_higher_epoch() -> None:
    # The operator applied pod -e6 (annotation 6) and died before status.epoch became 6;
    # then the pod's node was lost. Reusing 6 would run two drivers with epoch 6.
    observed = _obs(Memory(phase=Phase.STARTING, epoch=5), _pod("Unknown", epoch=6), annotation=6)
    result = plan(observed)
    epochs = {a.epoch for a in result.actions if a.kind in (Kind.RECOVER, Kind.LAUNCH)}
    assert epochs == {7}


def test_a_reserved_epoch_no_pod_ever_carried_is_still_reused() -> None:
    observed = _obs(Memory(phase=Phase.RECOVERING, epoch=5), None, annotation=6)
    result = plan(observed)
    epochs = {a.epoch for a in result.actions if a.kind in (Kind.RECOVER, Kind.LAUNCH)}
    assert epochs == {6}


def test_an_exited_driver_whose_epoch_status_never_recorded_is_remembered() -> None:
    # Pod -e6 was applied (annotation 6), status.epoch stayed 5, and the first time the
    # operator sees the pod it has already exited: after the backoff the relaunch must not
    # reuse 6, even though the pod object is gone by then.
    exited = _obs(
        Memory(phase=Phase.STARTING, epoch=5), _pod("Failed", epoch=6, exit_code=1), annotation=6
    )
    failed = plan(exited)
    assert failed.memory.epoch == 6
    later = replace(exited, now=exited.now + timedelta(hours=1), memory=failed.memory, driver=None)
    relaunch = plan(later)
    assert {a.epoch for a in relaunch.actions if a.kind in (Kind.RECOVER, Kind.LAUNCH)} == {7}


def test_a_fenced_exit_of_an_unrecorded_epoch_relaunches_above_it() -> None:
    fenced = plan(
        _obs(
            Memory(phase=Phase.STARTING, epoch=5),
            _pod("Failed", epoch=6, exit_code=EXIT_FENCED),
            annotation=6,
        )
    )
    assert fenced.memory.epoch == 6
    assert {a.epoch for a in fenced.actions if a.kind in (Kind.RECOVER, Kind.LAUNCH)} == {7}


def test_a_suspend_stopping_an_unrecorded_epoch_recovers_above_it() -> None:
    # Suspend's recovery leaves the prepared transactions of its own epoch alone; if that
    # epoch were the stopped pod's, they would stay prepared for the whole suspension.
    spec = _spec(suspend=True)
    stopping = plan(
        _obs(Memory(phase=Phase.RUNNING, epoch=5), _pod(epoch=6), spec=spec, annotation=6)
    )
    assert stopping.memory.epoch == 6
    suspended = plan(_obs(stopping.memory, None, spec=spec, annotation=6))
    assert [a.epoch for a in suspended.actions if a.kind is Kind.RECOVER] == [7]


def test_an_invalid_spec_stopping_an_unrecorded_epoch_remembers_it() -> None:
    stopped = plan(_obs(Memory(phase=Phase.STARTING, epoch=5), _pod(epoch=6), invalid=True))
    assert stopped.memory.epoch == 6


def test_a_lost_driver_of_an_unrecorded_epoch_is_remembered() -> None:
    lost = plan(_obs(Memory(phase=Phase.STARTING, epoch=5), _pod("Unknown", epoch=6), annotation=6))
    assert lost.memory.epoch == 6


def test_a_launch_that_status_recorded_but_no_pod_shows_is_not_reused() -> None:
    # The reconciler records status.epoch before it creates the pod: a pod applied and then
    # force-deleted (its node gone) before any observation may still run somewhere.
    observed = _obs(Memory(phase=Phase.STARTING, epoch=6), None, annotation=6)
    assert {a.epoch for a in plan(observed).actions if a.kind is Kind.LAUNCH} == {7}
