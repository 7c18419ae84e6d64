"""Rule 1 with a last good spec (issue 32 item 3): while the object's spec is refused, a driver
that fails, is lost or hangs goes the normal failure path and is relaunched from the spec its
ConfigMap holds, instead of the pipeline ending in Failed because of a typo in an edit."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta
from typing import Any

from eo_operator.planner import Kind, LastGood, Memory, Observation, Phase, plan
from eo_operator.status import status_from
from tests.operator.test_planner import NOW, _kinds, _obs, _pod, _spec

RNG = random.Random(7)
GOOD = LastGood(spec=_spec(), spec_hash="h1", generation=3)
"""The ConfigMap's spec: generation 3, which the driver of epoch 1 was launched from."""
ERROR = "spec.x: bad"


def _refused(memory: Memory, driver: Any = None, **kw: Any) -> Observation:
    """Generation 4 (refused) with generation 3's spec as the last good one."""
    last_good = kw.pop("last_good", GOOD)
    obs = _obs(memory, driver, invalid=True, annotation=kw.pop("annotation", 1), generation=4)
    return replace(obs, last_good=last_good, **kw)


def _spec_valid(obs: Observation, memory: Memory) -> dict[str, Any]:
    status = status_from(memory, obs, {})
    return next(c for c in status["conditions"] if c["type"] == "SpecValid")


def test_a_driver_that_fails_under_a_refused_spec_is_counted_and_relaunched_from_the_last_good_spec() -> (  # noqa: E501
    None
):
    failed = plan(
        _refused(Memory(phase=Phase.RUNNING, epoch=1), _pod("Failed", exit_code=137)), RNG
    )
    mem = failed.memory
    assert (mem.phase, mem.reason, mem.restarts) == (Phase.BACKOFF, "DriverFailed", 1)
    assert mem.failed_generation == 3  # the generation that runs, not the refused one
    assert "generation 4) is refused: spec.x: bad" in mem.message
    assert "the last good spec (generation 3, spec hash h1)" in mem.message
    assert Kind.LAUNCH not in _kinds(failed)  # the backoff first
    # The backoff over: fence and resolve at epoch 2, relaunch, and say from what.
    assert mem.backoff_until is not None
    later = replace(
        _refused(mem, None),
        now=mem.backoff_until + timedelta(seconds=1),
        failed=(_pod("Failed", exit_code=137),),
    )
    relaunch = plan(later, RNG)
    assert [
        (a.kind, a.epoch) for a in relaunch.actions if a.kind in (Kind.RECOVER, Kind.LAUNCH)
    ] == [
        (Kind.RECOVER, 2),
        (Kind.LAUNCH, 2),
    ]
    said = [a for a in relaunch.actions if a.kind is Kind.EVENT and a.reason == "LastGoodSpec"]
    assert len(said) == 1 and said[0].warning
    assert "epoch 2 from the last good spec (generation 3, spec hash h1)" in said[0].message
    assert relaunch.memory.phase is Phase.STARTING
    # Status: SpecValid stays False with the reason, and names the spec that runs.
    cond = _spec_valid(later, relaunch.memory)
    assert (cond["status"], cond["reason"]) == ("False", "InvalidSpec")
    assert ERROR in cond["message"] and "generation 3, spec hash h1" in cond["message"]


def test_without_a_last_good_spec_a_driver_that_fails_under_a_refused_spec_stays_failed() -> None:
    result = plan(
        _refused(Memory(phase=Phase.RUNNING, epoch=1), _pod("Failed", exit_code=1), last_good=None)
    )
    assert (result.memory.phase, result.memory.reason) == (Phase.FAILED, "InvalidSpec")
    assert Kind.LAUNCH not in _kinds(result)


def test_the_relaunched_driver_running_says_invalid_spec_and_the_spec_it_runs() -> None:
    relaunched = Memory(phase=Phase.STARTING, epoch=2, reason="Relaunch", restarts=1)
    result = plan(_refused(relaunched, _pod("Running", epoch=2), annotation=2), RNG)
    assert (result.memory.phase, result.memory.reason) == (Phase.RUNNING, "InvalidSpec")
    assert "keeps running the last valid spec it started with" in result.memory.message
    assert "generation 3, spec hash h1" in result.memory.message
    assert _kinds(result) == [Kind.EVENT]  # once per new error
    again = plan(_refused(result.memory, _pod("Running", epoch=2), annotation=2), RNG)
    assert again.actions == [] and again.memory == result.memory


def test_a_running_driver_is_not_restarted_while_the_spec_is_refused_whatever_its_hash() -> None:
    """Rule 6 is off while the spec is refused: the pod's hash may differ from the last good
    spec's (an operator upgrade changed the job image, an older hash formula)."""
    other = replace(GOOD, spec_hash="h-new-image")
    result = plan(_refused(Memory(phase=Phase.RUNNING, epoch=1), _pod(), last_good=other), RNG)
    assert Kind.DELETE_POD not in _kinds(result)
    assert (result.memory.phase, result.memory.reason) == (Phase.RUNNING, "InvalidSpec")


def test_a_driver_lost_with_its_node_under_a_refused_spec_is_fenced_and_relaunched() -> None:
    lost = _pod(
        node="node-a",
        node_problem="Ready=Unknown",
        node_problem_since=NOW - timedelta(seconds=120),
    )
    result = plan(_refused(Memory(phase=Phase.RUNNING, epoch=1), lost), RNG)
    assert _kinds(result)[:3] == [Kind.RECOVER, Kind.FORCE_DELETE_POD, Kind.LAUNCH]
    assert result.actions[0].epoch == result.actions[2].epoch == 2
    assert result.memory.reason == "DriverLost" and result.memory.restarts == 1
    assert "LastGoodSpec" in [a.reason for a in result.actions if a.kind is Kind.EVENT]
    # Before: rule 1 kept a lost driver "running" for as long as the spec stayed refused.
    before = plan(_refused(Memory(phase=Phase.RUNNING, epoch=1), lost, last_good=None), RNG)
    assert Kind.LAUNCH not in _kinds(before)


def test_another_refused_edit_is_no_fix_it_resets_no_budget_and_lifts_no_failed() -> None:
    """maxRestarts is 2 (the last good spec's restartPolicy)."""
    mem = Memory(
        phase=Phase.RUNNING,
        epoch=3,
        restarts=2,
        last_failure=NOW - timedelta(seconds=60),
        failed_generation=3,
    )
    crash = plan(_refused(mem, _pod("Failed", epoch=3, exit_code=1), annotation=3), RNG)
    assert (crash.memory.phase, crash.memory.reason) == (Phase.FAILED, "CrashLoop")
    assert crash.memory.failed_generation == 3
    # A second refused edit (generation 5): still Failed, nothing launched.
    later = replace(_refused(crash.memory, None, annotation=3), generation=5)
    assert plan(later, RNG).memory.phase is Phase.FAILED
    assert Kind.LAUNCH not in _kinds(plan(later, RNG))
    # A valid edit (generation 6) is the user's fix: a full budget and a relaunch.
    fixed = _obs(crash.memory, None, annotation=3, generation=6, spec_hash="h6")
    result = plan(fixed, RNG)
    assert Kind.LAUNCH in _kinds(result) and result.memory.restarts == 0


def test_a_valid_edit_after_a_relaunch_from_the_last_good_spec_is_a_spec_change_and_a_revert_none() -> (  # noqa: E501
    None
):
    running = Memory(phase=Phase.RUNNING, epoch=2, reason="InvalidSpec", message="x")
    edited = plan(_obs(running, _pod(epoch=2), annotation=2, generation=5, spec_hash="h5"), RNG)
    assert edited.memory.phase is Phase.STOPPING and Kind.DELETE_POD in _kinds(edited)
    reverted = plan(_obs(running, _pod(epoch=2), annotation=2, generation=5, spec_hash="h1"), RNG)
    assert Kind.DELETE_POD not in _kinds(reverted) and reverted.memory.reason == "Running"


def test_a_suspend_in_the_refused_object_still_stops_the_driver() -> None:
    """The reconciler gives the last good spec the object's ``suspend`` (``_last_good``)."""
    suspended = replace(GOOD, spec=_spec(suspend=True))
    result = plan(_refused(Memory(phase=Phase.RUNNING, epoch=1), _pod(), last_good=suspended))
    assert result.memory.phase is Phase.STOPPING and Kind.DELETE_POD in _kinds(result)
    assert Kind.LAUNCH not in _kinds(result)


def test_the_last_good_spec_s_restart_policy_governs_the_relaunches() -> None:
    patient = replace(GOOD, spec=_spec(restartPolicy={"maxRestarts": 0}))
    result = plan(
        _refused(
            Memory(phase=Phase.RUNNING, epoch=1), _pod("Failed", exit_code=1), last_good=patient
        ),
        RNG,
    )
    assert (result.memory.phase, result.memory.reason) == (Phase.FAILED, "CrashLoop")


def test_a_refused_edit_during_a_backoff_is_said_once_and_the_backoff_goes_on() -> None:
    waiting = Memory(
        phase=Phase.BACKOFF,
        epoch=1,
        restarts=1,
        last_failure=NOW,
        backoff_until=NOW + timedelta(seconds=30),
        failed_generation=3,
        message="driver p-driver-e1 exited with code 1 (Error); restart 1 in 30s",
    )
    result = plan(_refused(waiting, None), RNG)
    assert result.memory.phase is Phase.BACKOFF and Kind.LAUNCH not in _kinds(result)
    said = [a for a in result.actions if a.kind is Kind.EVENT and a.reason == "InvalidSpec"]
    assert len(said) == 1 and said[0].warning and ERROR in said[0].message
    again = plan(_refused(result.memory, None), RNG)
    assert [a for a in again.actions if a.kind is Kind.EVENT] == []
