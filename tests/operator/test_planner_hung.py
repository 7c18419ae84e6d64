"""Rule 7b: a Running driver that makes no progress for restartPolicy.progressTimeoutSeconds is
restarted through the failure path (delete, count, back off, recover, relaunch), counted and
said so; a driver the operator never reached, a suspended pipeline, a driver still starting, a
lost node and an operator that could not recover are not judged."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta
from typing import Any

from eo_operator.planner import (
    HUNG,
    Blocked,
    DriverPod,
    Kind,
    Memory,
    Observation,
    Phase,
    Plan,
    plan,
    progress_timeout,
)
from eo_operator.status import memory_from_status, status_from
from tests.operator.test_planner import NOW, _kinds, _obs, _pod, _spec

BOUND = 620
"""progress_timeout of the default spec: 2 x (300 s slow-batch alert + 10 s trigger)."""
LAUNCHED = NOW - timedelta(hours=2)


def _running(epoch: int = 1, **kw: Any) -> DriverPod:
    return _pod("Running", epoch, **{"created_at": LAUNCHED, **kw})


def _watched(
    silent_for: float, memory: Memory | None = None, driver: DriverPod | None = None, **kw: object
) -> Observation:
    """A Running driver whose endpoint answered, its last progress ``silent_for`` s ago."""
    mem = memory or Memory(phase=Phase.RUNNING, epoch=1, last_launch=LAUNCHED)
    obs = _obs(mem, driver or _running(), annotation=1, **kw)  # type: ignore[arg-type]
    return replace(obs, progress=NOW - timedelta(seconds=silent_for))


def _events(result: Plan) -> list[tuple[str, bool, str]]:
    return [(a.reason, a.warning, a.message) for a in result.actions if a.kind is Kind.EVENT]


def _deleted(result: Plan) -> list[str | None]:
    return [a.pod for a in result.actions if a.kind is Kind.DELETE_POD]


def test_a_driver_silent_past_the_bound_is_deleted_counted_and_said_so() -> None:
    result = plan(_watched(BOUND + 5), random.Random(1))
    assert _deleted(result) == ["p-driver-e1"]
    assert result.memory.phase is Phase.BACKOFF and result.memory.restarts == 1
    assert result.memory.reason == HUNG and result.memory.last_failure == NOW
    failure = result.memory.failure
    assert failure is not None and (failure.pod, failure.reason) == ("p-driver-e1", HUNG)
    assert "for 625s" in failure.message
    [(reason, warning, message)] = _events(result)
    assert (reason, warning) == (HUNG, True)
    assert "no trigger, decided batch or launch for 625s" in message
    assert "restartPolicy.progressTimeoutSeconds is 620 (unset: the default)" in message
    assert "raise restartPolicy.progressTimeoutSeconds" in message
    assert "restart 1 in" in message


def test_a_driver_silent_within_the_bound_runs_on() -> None:
    result = plan(_watched(BOUND - 5))
    assert result.memory.phase is Phase.RUNNING and result.actions == []


def test_the_bound_is_the_spec_s_and_0_turns_it_off() -> None:
    spec = _spec(
        restartPolicy={"progressTimeoutSeconds": 60}, alerts={"maxCheckpointDurationSeconds": 20}
    )
    assert progress_timeout(spec) == 60
    assert plan(_watched(61, spec=spec)).memory.reason == HUNG
    assert plan(_watched(59, spec=spec)).actions == []
    off = _spec(restartPolicy={"progressTimeoutSeconds": 0})
    assert progress_timeout(off) is None
    assert plan(_watched(86400, spec=off)).actions == []


def test_unset_the_bound_is_twice_the_slowest_healthy_gap_and_at_least_ten_minutes() -> None:
    assert progress_timeout(_spec()) == BOUND
    slow = _spec(alerts={"maxCheckpointDurationSeconds": 1800})
    assert progress_timeout(slow) == 2 * (1800 + 10)
    assert plan(_watched(BOUND + 5, spec=slow)).actions == []
    fast = _spec(alerts={"maxCheckpointDurationSeconds": 5}, checkpoint={"location": "/c"})
    assert progress_timeout(fast) == 600


def test_a_driver_whose_endpoint_never_answered_is_not_judged() -> None:
    # After an operator restart, or behind a NetworkPolicy: launched hours ago, never heard.
    obs = replace(_watched(BOUND * 10), progress=None)
    result = plan(obs)
    assert result.memory.phase is Phase.RUNNING and result.actions == []


def test_the_launch_counts_as_progress() -> None:
    # What the operator saw is old (the last decided batch, before this launch); the launch
    # (status.lastLaunchTime, or the pod's creation) is recent: the driver is still starting.
    recent = NOW - timedelta(seconds=30)
    mem = Memory(phase=Phase.RUNNING, epoch=1, last_launch=recent)
    assert plan(_watched(BOUND * 10, memory=mem)).actions == []
    pod = _running(created_at=recent)
    assert plan(_watched(BOUND * 10, driver=pod)).actions == []


def test_a_suspended_pipeline_stops_its_driver_and_does_not_count_it_as_hung() -> None:
    result = plan(_watched(BOUND * 10, spec=_spec(suspend=True)))
    assert result.memory.phase is Phase.STOPPING and result.memory.restarts == 0
    assert HUNG not in {reason for reason, _, _ in _events(result)}


def test_a_pending_driver_is_the_start_timeout_s_business() -> None:
    pending = _pod("Pending", created_at=NOW - timedelta(seconds=30))
    result = plan(_watched(BOUND * 10, driver=pending))
    assert result.memory.phase is Phase.STARTING and result.actions == []


def test_a_driver_on_a_node_that_is_not_ready_is_left_to_rule_2() -> None:
    # Its endpoint is silent because its node is away: the node-lost grace and the disruption
    # guard decide, not the no-progress clock.
    pod = _running(node="n1", node_problem="Ready=Unknown", node_problem_since=NOW)
    result = plan(_watched(BOUND * 10, driver=pod))
    assert result.memory.phase is Phase.RUNNING and result.actions == []


def test_while_the_operator_is_blocked_the_hung_driver_is_held_and_status_says_so() -> None:
    blocked = Blocked("SinkReachable", "SinkUnreachable", "connection refused", NOW)
    mem = Memory(phase=Phase.RUNNING, epoch=1, last_launch=LAUNCHED, blocked=blocked)
    result = plan(_watched(BOUND + 5, memory=mem))
    assert result.actions == [] and result.memory.phase is Phase.RUNNING
    assert "not restarted while SinkUnreachable" in result.memory.message
    assert result.memory.restarts == 0


def test_the_next_passes_delete_it_back_off_then_recover_and_relaunch_above_it() -> None:
    obs = _watched(BOUND + 5)
    first = plan(obs, random.Random(1))
    # The deletion is under way: the pod is set aside, not counted again.
    leaving = _running(deleting_since=NOW)
    again = plan(replace(obs, memory=first.memory, driver=leaving, now=NOW + timedelta(seconds=1)))
    assert again.memory.restarts == 1 and again.memory.phase is Phase.BACKOFF
    assert again.actions == []
    # After the backoff: the same recovery and launch as after any failure, epoch 2.
    later = replace(obs, memory=first.memory, driver=None, now=NOW + timedelta(minutes=5))
    relaunch = plan(later)
    assert _kinds(relaunch)[:2] == [Kind.RECOVER, Kind.LAUNCH]
    assert {a.epoch for a in relaunch.actions if a.epoch is not None} == {2}


def test_hung_drivers_past_max_restarts_fail_the_pipeline_and_still_say_why() -> None:
    mem = Memory(phase=Phase.RUNNING, epoch=3, restarts=2, last_failure=NOW, last_launch=LAUNCHED)
    result = plan(_watched(BOUND + 5, memory=mem, driver=_running(epoch=3)), random.Random(1))
    assert result.memory.phase is Phase.FAILED and result.memory.reason == "CrashLoop"
    assert {reason for reason, _, _ in _events(result)} == {"CrashLoop", HUNG}
    assert _deleted(result) == ["p-driver-e3"]


def test_the_hung_restart_is_recorded_in_status_as_the_other_restarts() -> None:
    obs = _watched(BOUND + 5)
    result = plan(obs, random.Random(1))
    status = status_from(result.memory, obs, {})
    assert status["restarts"] == 1 and status["reason"] == HUNG
    assert status["lastFailure"]["reason"] == HUNG
    assert status["lastFailure"]["pod"] == "p-driver-e1"
    assert memory_from_status(status).failure == result.memory.failure
