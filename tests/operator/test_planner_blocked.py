"""A pipeline the environment keeps from starting (Secret, database, ServiceAccount) retries
and, past restartPolicy.startTimeoutSeconds, says Failed with the blocker's reason; status
carries the blocker as a condition and drops a stale SinkContract one once running."""

from __future__ import annotations

from datetime import timedelta

from eo_operator.planner import Blocked, Kind, Memory, Phase, plan
from eo_operator.status import memory_from_status, status_from
from tests.operator.test_planner import NOW, _kinds, _obs, _pod, _spec


def _secret_missing(seconds_ago: float) -> Blocked:
    return Blocked(
        "SinkReachable",
        "SecretMissing",
        "Secret ns/db named by a sink's secretKeyRef does not exist",
        NOW - timedelta(seconds=seconds_ago),
    )


def test_a_blocked_start_is_retried_with_the_blocker_as_reason() -> None:
    result = plan(_obs(Memory(blocked=_secret_missing(5))))
    assert result.memory.phase is Phase.STARTING and result.memory.reason == "Launch"
    assert result.memory.message.startswith("SecretMissing: Secret ns/db")
    assert _kinds(result)[:2] == [Kind.RECOVER, Kind.LAUNCH]
    assert result.requeue_seconds == 10.0 and result.memory.restarts == 0


def test_a_start_blocked_past_the_start_timeout_fails_with_one_warning_and_keeps_retrying() -> None:
    spec = _spec(restartPolicy={"startTimeoutSeconds": 60})
    failed = plan(_obs(Memory(phase=Phase.STARTING, blocked=_secret_missing(61)), spec=spec))
    assert failed.memory.phase is Phase.FAILED and failed.memory.reason == "SecretMissing"
    assert failed.memory.failed_generation is None and failed.memory.restarts == 0
    assert _kinds(failed)[:3] == [Kind.EVENT, Kind.RECOVER, Kind.LAUNCH]
    assert failed.actions[0].warning and "does not exist" in failed.actions[0].message
    again = plan(_obs(failed.memory, spec=spec))
    assert _kinds(again)[:2] == [Kind.RECOVER, Kind.LAUNCH]
    assert again.memory.phase is Phase.FAILED


def test_the_blocker_round_trips_through_status_as_a_condition() -> None:
    obs = _obs(Memory(blocked=_secret_missing(5)))
    status = status_from(plan(obs).memory, obs, {})
    cond = next(c for c in status["conditions"] if c["type"] == "SinkReachable")
    assert (cond["status"], cond["reason"]) == ("False", "SecretMissing")
    back = memory_from_status(status)
    assert back.blocked is not None and back.blocked.reason == "SecretMissing"


def test_a_running_pipeline_no_longer_shows_an_old_sink_contract_failure() -> None:
    failed = Memory(phase=Phase.FAILED, epoch=1, failed_generation=1, reason="SinkContract")
    obs = _obs(failed, None, annotation=1)
    before = status_from(failed, obs, {})
    running = plan(_obs(Memory(phase=Phase.STARTING, epoch=2), _pod(epoch=2), annotation=2))
    after = status_from(running.memory, obs, before)
    cond = next(c for c in after["conditions"] if c["type"] == "SinkContract")
    assert (cond["status"], cond["reason"]) == ("True", "Satisfied")


def test_a_driver_created_after_a_blocked_failure_starts_without_the_old_reason() -> None:
    failed = Memory(phase=Phase.FAILED, epoch=1, reason="SecretMissing")
    result = plan(_obs(failed, _pod("Pending"), annotation=1))
    assert result.memory.phase is Phase.STARTING and result.memory.reason == "Launched"


def _foreign_owner(seconds_ago: float) -> Blocked:
    return Blocked(
        "FenceOwned",
        "ForeignFenceOwner",
        "the sink fence of ns/p (epoch 3) is owned by uid-a, another writer of this pipeline",
        NOW - timedelta(seconds=seconds_ago),
    )


def test_a_fence_another_writer_owns_is_a_wait_for_a_hand_over_never_a_failure() -> None:
    spec = _spec(restartPolicy={"startTimeoutSeconds": 60})
    for waited in (5, 3600):
        result = plan(_obs(Memory(phase=Phase.WAITING, blocked=_foreign_owner(waited)), spec=spec))
        assert result.memory.phase is Phase.WAITING
        assert result.memory.reason == "ForeignFenceOwner"
        assert "owned by uid-a" in result.memory.message
        assert result.memory.failed_generation is None and result.memory.restarts == 0
        assert _kinds(result) == [Kind.RECOVER, Kind.LAUNCH, Kind.EVENT]
        assert result.requeue_seconds == 30.0


def test_the_foreign_owner_round_trips_through_status_as_the_fence_owned_condition() -> None:
    obs = _obs(Memory(blocked=_foreign_owner(5)))
    status = status_from(plan(obs).memory, obs, {})
    assert status["phase"] == "Waiting"
    cond = next(c for c in status["conditions"] if c["type"] == "FenceOwned")
    assert (cond["status"], cond["reason"]) == ("False", "ForeignFenceOwner")
    back = memory_from_status(status)
    assert back.phase is Phase.WAITING
    assert back.blocked is not None and back.blocked.reason == "ForeignFenceOwner"


def _pod_forbidden(seconds_ago: float) -> Blocked:
    return Blocked(
        "DriverCreatable", "PodForbidden", "exceeded quota", NOW - timedelta(seconds=seconds_ago)
    )


def test_a_refused_create_is_retried_alone_with_the_epoch_already_recovered() -> None:
    """Review operator-2 N9: no new epoch, no fence raised again, no event per retry."""
    mem = Memory(phase=Phase.STARTING, epoch=3, recovered_epoch=3, blocked=_pod_forbidden(20))
    result = plan(_obs(mem, None, annotation=3))
    assert _kinds(result) == [Kind.LAUNCH] and result.actions[0].epoch == 3


def test_a_refused_create_whose_epoch_is_not_the_recovered_one_recovers_first() -> None:
    mem = Memory(phase=Phase.STARTING, epoch=3, recovered_epoch=2, blocked=_pod_forbidden(20))
    assert _kinds(plan(_obs(mem, None, annotation=3)))[:2] == [Kind.RECOVER, Kind.LAUNCH]


def test_a_blocker_that_lasts_is_retried_less_often_up_to_a_minute() -> None:
    assert plan(_obs(Memory(blocked=_secret_missing(30)))).requeue_seconds == 10.0
    assert plan(_obs(Memory(blocked=_secret_missing(300)))).requeue_seconds == 30.0
    assert plan(_obs(Memory(blocked=_secret_missing(3_600)))).requeue_seconds == 60.0
