"""Failed drivers leave forensics behind, and a driver that never starts is a counted failure."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

from eo_jobs.protocol.errors import EXIT_CHECKPOINT_RESET, EXIT_FENCED
from eo_operator.planner import DriverPod, Failure, Kind, Memory, Observation, Phase, plan
from eo_operator.status import memory_from_status, status_from
from tests.operator.test_planner import NOW, _kinds, _obs, _pod, _spec

TRACEBACK = """{"message": "batch 3 started", "levelname": "INFO"}
Traceback (most recent call last):
  File "/app/eo_jobs/runtime/main.py", line 1, in run
RuntimeError: the source folder /in vanished
"""


def _deleted(result: object) -> list[str | None]:
    return [a.pod for a in result.actions if a.kind is Kind.DELETE_POD]  # type: ignore[attr-defined]


def _events(result: object) -> str:
    return "\n".join(
        f"{a.reason}: {a.message}"
        for a in result.actions  # type: ignore[attr-defined]
        if a.kind is Kind.EVENT
    )


def _crashed(**kw: object) -> DriverPod:
    fields: dict[str, object] = {"exit_code": 1, "reason": "Error", "message": TRACEBACK}
    fields.update(kw)
    return _pod("Failed", **fields)


def test_a_failed_driver_records_its_reason_exit_code_and_last_log_line() -> None:
    result = plan(_obs(Memory(phase=Phase.RUNNING, epoch=1), _crashed(), annotation=1))
    assert result.memory.failure == Failure(
        pod="p-driver-e1",
        reason="Error",
        exit_code=1,
        message="RuntimeError: the source folder /in vanished",
        time=NOW,
    )
    assert "RuntimeError: the source folder /in vanished" in result.memory.message
    assert "exited with code 1 (Error): RuntimeError" in _events(result)
    assert _deleted(result) == []


def test_an_oom_killed_driver_says_so_in_status_and_event() -> None:
    killed = _crashed(exit_code=137, reason="OOMKilled", message="")
    result = plan(_obs(Memory(phase=Phase.RUNNING, epoch=1), killed, annotation=1))
    assert result.memory.failure is not None and result.memory.failure.reason == "OOMKilled"
    assert "exited with code 137 (OOMKilled)" in _events(result)


def test_a_recorded_failed_pod_is_not_counted_again_and_stays_during_the_backoff() -> None:
    obs = _obs(Memory(phase=Phase.RUNNING, epoch=1), _crashed(), annotation=1)
    first = plan(obs, random.Random(1))
    again = plan(replace(obs, memory=first.memory, now=NOW + timedelta(seconds=1)))
    assert again.memory.restarts == 1 and again.memory.phase is Phase.BACKOFF
    assert again.actions == []


def test_after_the_backoff_the_next_driver_launches_beside_the_kept_failed_pod() -> None:
    obs = _obs(Memory(phase=Phase.RUNNING, epoch=1), _crashed(), annotation=1)
    first = plan(obs, random.Random(1))
    later = replace(obs, memory=first.memory, now=NOW + timedelta(minutes=5))
    relaunch = plan(later)
    assert [a.epoch for a in relaunch.actions if a.kind is Kind.LAUNCH] == [2]
    assert _deleted(relaunch) == []


def test_with_keep_failed_pods_0_a_failed_driver_is_deleted_at_once() -> None:
    spec = _spec(restartPolicy={"keepFailedPods": 0})
    result = plan(_obs(Memory(phase=Phase.RUNNING, epoch=1), _crashed(), spec=spec, annotation=1))
    assert _deleted(result) == ["p-driver-e1"]
    assert result.memory.failure is not None and result.memory.failure.pod == "p-driver-e1"


def test_only_the_newest_failed_pods_are_kept() -> None:
    spec = _spec(restartPolicy={"keepFailedPods": 2})
    older = (_crashed(epoch=2), _crashed(epoch=1))
    obs = replace(
        _obs(Memory(phase=Phase.RUNNING, epoch=3), _crashed(epoch=3), spec=spec, annotation=3),
        failed=older,
    )
    assert _deleted(plan(obs)) == ["p-driver-e1"]


def test_a_failed_pod_of_an_older_epoch_is_kept_not_deleted_as_a_zombie() -> None:
    # The driver of epoch 2 was launched after the kept failure of epoch 1 and is gone (its
    # pod deleted without a trace): the newest pod is the kept failed driver of epoch 1, not a
    # leftover to delete.
    mem = Memory(phase=Phase.STARTING, epoch=2, failure=None)
    result = plan(_obs(mem, _crashed(epoch=1), annotation=2))
    assert _deleted(result) == []
    assert [a.epoch for a in result.actions if a.kind is Kind.LAUNCH] == [3]


def test_a_fenced_driver_is_deleted_not_kept() -> None:
    fenced = _pod("Failed", epoch=2, exit_code=EXIT_FENCED)
    result = plan(_obs(Memory(phase=Phase.RUNNING, epoch=2), fenced, annotation=2))
    assert _deleted(result) == ["p-driver-e2"]
    assert result.memory.failure is None


def test_a_permanent_failure_keeps_its_pod_for_the_log() -> None:
    reset = _crashed(exit_code=EXIT_CHECKPOINT_RESET)
    result = plan(_obs(Memory(phase=Phase.RUNNING, epoch=1), reset, annotation=1))
    assert result.memory.phase is Phase.FAILED and _deleted(result) == []
    assert result.memory.failure is not None and result.memory.failure.exit_code == 76
    stays = plan(_obs(result.memory, reset, annotation=1))
    assert stays.actions == [] and stays.memory.phase is Phase.FAILED


def _stuck(age: float, **kw: object) -> DriverPod:
    fields: dict[str, object] = {
        "created_at": NOW - timedelta(seconds=age),
        "reason": "ImagePullBackOff",
        "message": 'Back-off pulling image "registry.invalid/eo-job:1"',
    }
    fields.update(kw)
    return _pod("Pending", **fields)


def test_a_driver_pending_past_the_start_timeout_is_deleted_and_counted_with_its_reason() -> None:
    result = plan(
        _obs(Memory(phase=Phase.STARTING, epoch=1), _stuck(601), annotation=1), random.Random(1)
    )
    assert result.memory.phase is Phase.BACKOFF and result.memory.restarts == 1
    assert result.memory.reason == "StartTimeout"
    assert _deleted(result) == ["p-driver-e1"]
    assert result.memory.failure == Failure(
        pod="p-driver-e1",
        reason="ImagePullBackOff",
        exit_code=None,
        message='Back-off pulling image "registry.invalid/eo-job:1"',
        time=NOW,
    )
    events = [a for a in result.actions if a.kind is Kind.EVENT]
    assert [(a.reason, a.warning) for a in events] == [("StartTimeout", True)]
    assert "did not start within 600s: ImagePullBackOff: Back-off pulling" in events[0].message


def test_a_driver_pending_within_the_start_timeout_is_left_to_start() -> None:
    result = plan(_obs(Memory(phase=Phase.STARTING, epoch=1), _stuck(599), annotation=1))
    assert result.memory.phase is Phase.STARTING and result.actions == []


def test_the_start_timeout_is_the_spec_s() -> None:
    spec = _spec(restartPolicy={"startTimeoutSeconds": 60})
    result = plan(_obs(Memory(phase=Phase.STARTING, epoch=1), _stuck(61), spec=spec, annotation=1))
    assert result.memory.reason == "StartTimeout"


def test_a_timed_out_pod_still_being_deleted_is_not_counted_again() -> None:
    obs = _obs(Memory(phase=Phase.STARTING, epoch=1), _stuck(601), annotation=1)
    first = plan(obs, random.Random(1))
    leaving = _stuck(602, deleting_since=NOW)
    again = plan(replace(obs, memory=first.memory, driver=leaving))
    assert again.memory.restarts == 1 and again.memory.phase is Phase.BACKOFF
    assert again.actions == []


def test_a_timed_out_pod_whose_deletion_was_never_sent_is_deleted_without_counting() -> None:
    obs = _obs(Memory(phase=Phase.STARTING, epoch=1), _stuck(601), annotation=1)
    first = plan(obs, random.Random(1))
    again = plan(replace(obs, memory=first.memory))
    assert again.memory.restarts == 1
    assert _kinds(again) == [Kind.DELETE_POD]


def test_start_timeouts_past_max_restarts_fail_the_pipeline_and_still_say_why() -> None:
    mem = Memory(phase=Phase.STARTING, epoch=3, restarts=2, last_failure=NOW)
    result = plan(_obs(mem, _stuck(601, epoch=3), annotation=3))
    assert result.memory.phase is Phase.FAILED and result.memory.reason == "CrashLoop"
    assert {a.reason for a in result.actions if a.kind is Kind.EVENT} == {
        "CrashLoop",
        "StartTimeout",
    }
    assert _deleted(result) == ["p-driver-e3"]


def test_the_last_failure_survives_the_status_round_trip() -> None:
    result = plan(_obs(Memory(phase=Phase.RUNNING, epoch=1), _crashed(), annotation=1))
    obs: Observation = _obs()
    status = status_from(result.memory, obs, {})
    assert status["lastFailure"]["message"] == "RuntimeError: the source folder /in vanished"
    assert memory_from_status(status).failure == result.memory.failure
