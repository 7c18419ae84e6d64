"""The planner never hands one epoch to two drivers."""

from __future__ import annotations

from eo_operator.planner import Kind, Memory, Phase, plan
from tests.operator.test_planner import _obs, _pod


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
