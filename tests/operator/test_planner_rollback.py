"""Automatic rollback to the last stable spec (issue 32 item 4, restartPolicy.rollbackAfterSeconds):
a new spec whose driver is not stable within the bound after its first launch is replaced by
the last stable spec, says so, and is not tried again until the spec is edited."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta
from typing import Any

from eo_operator.planner import (
    Kind,
    LastGood,
    Memory,
    Observation,
    Phase,
    Plan,
    Rollout,
    Stable,
    plan,
)
from eo_operator.status import memory_from_status, status_from
from tests.operator.test_planner import NOW, _kinds, _obs, _pod, _spec

RNG = random.Random(3)
BOUND = 300
POLICY = {"maxRestarts": 5, "backoffSeconds": 10, "rollbackAfterSeconds": BOUND}
STABLE = LastGood(spec=_spec(restartPolicy=POLICY), spec_hash="h1", generation=1)
"""The copy of the last stable spec: generation 1."""


def _memory(**kw: Any) -> Memory:
    """Generation 2 (hash h2) launched with epoch 2 at ``since``; generation 1 was stable."""
    since = kw.pop("since", NOW - timedelta(seconds=BOUND + 1))
    return Memory(
        phase=kw.pop("phase", Phase.RUNNING),
        epoch=2,
        last_stable=Stable("h1", 1, NOW - timedelta(hours=1)),
        rollout=Rollout("h2", 2, since),
        **kw,
    )


def _new(memory: Memory, driver: Any = "running", **kw: Any) -> Observation:
    """The object at generation 2 (hash h2), rollback on unless told."""
    if driver == "running":
        driver = _pod(epoch=2, spec_hash="h2", generation=2)
    obs = _obs(
        memory,
        driver,
        spec=kw.pop("spec", _spec(restartPolicy=POLICY)),
        spec_hash=kw.pop("spec_hash", "h2"),
        generation=kw.pop("generation", 2),
        annotation=kw.pop("annotation", 2),
    )
    return replace(obs, stable_spec=kw.pop("stable_spec", STABLE), decided_epoch=1, **kw)


def _events(result: Plan, reason: str) -> list[str]:
    return [a.message for a in result.actions if a.kind is Kind.EVENT and a.reason == reason]


def test_a_new_spec_not_stable_within_the_bound_is_rolled_back_to_the_last_stable_spec() -> None:
    result = plan(_new(_memory()), RNG)
    rolled = result.memory.rolled_back
    assert rolled is not None
    assert (rolled.from_generation, rolled.from_spec_hash) == (2, "h2")
    assert (rolled.to_generation, rolled.to_spec_hash) == (1, "h1")
    # Its driver is stopped at a batch boundary (rule 6 against the last stable spec).
    assert (result.memory.phase, result.memory.reason) == (Phase.STOPPING, "RolledBack")
    assert result.actions[0].kind is Kind.DELETE_POD and result.actions[0].pod == "p-driver-e2"
    said = _events(result, "RolledBack")
    assert len(said) == 1
    assert "generation 2 (spec hash h2) did not run stable within" in said[0]
    assert "restartPolicy.rollbackAfterSeconds 300" in said[0]
    assert "last stable spec (generation 1, spec hash h1)" in said[0]
    # Status: rolledBack names both generations, condition RolledBack is True.
    status = status_from(result.memory, _new(_memory()), {})
    assert status["rolledBack"]["fromGeneration"] == 2 and status["rolledBack"]["toGeneration"] == 1
    cond = next(c for c in status["conditions"] if c["type"] == "RolledBack")
    assert (cond["status"], cond["reason"]) == ("True", "RolledBack")
    assert memory_from_status(status).rolled_back == rolled


def test_then_the_last_stable_spec_is_relaunched_and_runs_said_rolled_back() -> None:
    stopping = plan(_new(_memory()), RNG).memory
    relaunch = plan(_new(stopping, None), RNG)
    assert [
        (a.kind, a.epoch) for a in relaunch.actions if a.kind in (Kind.RECOVER, Kind.LAUNCH)
    ] == [
        (Kind.RECOVER, 3),
        (Kind.LAUNCH, 3),
    ]
    assert _events(relaunch, "RolledBack") == []  # said once, when it began
    assert relaunch.memory.rolled_back == stopping.rolled_back
    running = _pod(epoch=3, spec_hash="h1", generation=1)
    steady = plan(_new(relaunch.memory, running, annotation=3), RNG)
    assert steady.actions == []  # the last stable spec's driver is not restarted (rule 6)
    assert (steady.memory.phase, steady.memory.reason) == (Phase.RUNNING, "RolledBack")


def test_a_rollback_is_not_retried_against_the_same_generation() -> None:
    rolled = plan(_new(_memory()), RNG).memory
    running = _pod(epoch=3, spec_hash="h1", generation=1)
    later = replace(_new(rolled, running, annotation=3), now=NOW + timedelta(days=1))
    result = plan(later, RNG)
    assert result.actions == [] and result.memory.rolled_back == rolled.rolled_back
    # No clock for the rolled-back spec either: it is not launched again.
    assert result.memory.rollout is None


def test_an_edit_ends_the_rollback_and_the_new_spec_gets_its_own_clock() -> None:
    rolled = plan(_new(_memory()), RNG).memory
    running = _pod(epoch=3, spec_hash="h1", generation=1)
    edited = plan(_new(rolled, running, annotation=3, generation=3, spec_hash="h3"), RNG)
    assert edited.memory.rolled_back is None
    assert edited.memory.phase is Phase.STOPPING and edited.memory.reason == "SpecChanged"
    launch = plan(_new(edited.memory, None, annotation=3, generation=3, spec_hash="h3"), RNG)
    assert Kind.LAUNCH in _kinds(launch)
    assert launch.memory.rollout == Rollout("h3", 3, NOW)
    status = status_from(launch.memory, _new(edited.memory), {"conditions": []})
    assert status["rolledBack"] is None  # the merge patch removes it


def test_a_revert_to_the_last_stable_spec_ends_the_rollback_and_restarts_nothing() -> None:
    rolled = plan(_new(_memory()), RNG).memory
    running = _pod(epoch=3, spec_hash="h1", generation=1)
    reverted = plan(_new(rolled, running, annotation=3, generation=3, spec_hash="h1"), RNG)
    assert reverted.actions == [] and reverted.memory.rolled_back is None
    assert reverted.memory.reason == "Running"
    status = status_from(
        reverted.memory,
        _new(rolled),
        {"conditions": [{"type": "RolledBack", "status": "True", "reason": "RolledBack"}]},
    )
    cond = next(c for c in status["conditions"] if c["type"] == "RolledBack")
    assert (cond["status"], cond["reason"]) == ("False", "SpecEdited")


def test_no_rollback_within_the_bound_when_off_under_suspend_or_without_the_stable_spec() -> None:
    within = _memory(since=NOW - timedelta(seconds=BOUND - 1))
    assert plan(_new(within), RNG).memory.rolled_back is None
    off = _spec(restartPolicy={"maxRestarts": 5, "backoffSeconds": 10})
    assert plan(_new(_memory(), spec=off), RNG).memory.rolled_back is None
    suspended = _spec(restartPolicy=POLICY, suspend=True)
    assert plan(_new(_memory(), spec=suspended), RNG).memory.rolled_back is None
    assert plan(_new(_memory(), stable_spec=None), RNG).memory.rolled_back is None
    other = replace(STABLE, spec_hash="h0")  # not the spec lastStable names
    assert plan(_new(_memory(), stable_spec=other), RNG).memory.rolled_back is None


def test_a_new_spec_whose_driver_decided_a_batch_is_stable_and_not_rolled_back() -> None:
    obs = replace(_new(_memory()), decided_epoch=2)
    result = plan(obs, RNG)
    assert result.memory.rolled_back is None and result.actions == []
    assert result.memory.last_stable is not None and result.memory.last_stable.spec_hash == "h2"


def test_a_crash_looping_new_spec_is_rolled_back_with_a_fresh_budget() -> None:
    failed = _memory(
        phase=Phase.FAILED, reason="CrashLoop", restarts=6, failed_generation=2, last_failure=NOW
    )
    result = plan(_new(failed, None), RNG)
    assert result.memory.rolled_back is not None and result.memory.reason == "RolledBack"
    assert [a.epoch for a in result.actions if a.kind is Kind.LAUNCH] == [3]
    assert result.memory.restarts == 0


def test_the_first_launch_of_a_spec_starts_the_clock_and_a_relaunch_keeps_it() -> None:
    fresh = Memory(phase=Phase.RUNNING, epoch=1, last_stable=Stable("h1", 1, NOW))
    stopped = replace(fresh, phase=Phase.STOPPING, reason="SpecChanged")
    launch = plan(_new(stopped, None, annotation=1), RNG)
    assert launch.memory.rollout == Rollout("h2", 2, NOW)
    crashed = replace(launch.memory, phase=Phase.BACKOFF, backoff_until=NOW)
    again = plan(replace(_new(crashed, None), now=NOW + timedelta(seconds=30)), RNG)
    assert Kind.LAUNCH in _kinds(again) and again.memory.rollout == Rollout("h2", 2, NOW)


def test_a_rollback_whose_stable_copy_is_gone_ends_instead_of_running_nothing() -> None:
    rolled = plan(_new(_memory()), RNG).memory
    gone = plan(_new(rolled, None, stable_spec=None), RNG)
    assert gone.memory.rolled_back is None
    assert Kind.LAUNCH in _kinds(gone)  # the object's spec, as without a rollback


def test_no_rollback_before_the_operator_read_the_decision_log() -> None:
    """After an operator restart ``decided_epoch`` is unknown until its first health pass: a
    new spec's driver that decides batches would look unstable, and be rolled back."""
    assert plan(replace(_new(_memory()), decided_epoch=None), RNG).memory.rolled_back is None
