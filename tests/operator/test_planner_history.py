"""What runs, what last worked, how it got here (issue 32 item 4): the planner's records.

``status.history`` gains a transition only when the phase or the reason changes, keeps the
newest 10, each message cut to 200 characters; ``status.lastStable`` moves to a driver's spec
only once that driver is Running and a batch carrying its epoch was decided (so after its
launch, by it), and a failing new spec leaves it where it was. Both survive the round trip
through status, as an operator restart reads them back.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

from eo_operator.planner import (
    HISTORY_MAX,
    HISTORY_MESSAGE_MAX,
    DriverPod,
    Kind,
    Memory,
    Observation,
    Phase,
    Stable,
    Transition,
    plan,
)
from eo_operator.status import memory_from_status, status_from
from tests.operator.test_planner import NOW, _obs, _pod

RNG = random.Random(7)


def _running(
    epoch: int = 1, decided: int | None = None, **kw: object
) -> tuple[Observation, DriverPod]:
    pod = _pod("Running", epoch, generation=kw.pop("pod_generation", 1), **kw)
    memory = Memory(phase=Phase.RUNNING, epoch=epoch, reason="Running")
    obs = replace(_obs(memory, pod, annotation=epoch), decided_epoch=decided)
    return obs, pod


# --- history ---------------------------------------------------------------------------------


def test_a_launch_appends_starting_with_the_epoch_it_launches() -> None:
    result = plan(_obs(), RNG)
    assert result.memory.history == (
        Transition(NOW, "Starting", "Launch", "launching the driver with epoch 1", 1),
    )


def test_a_pass_that_changes_neither_phase_nor_reason_appends_nothing() -> None:
    obs, _ = _running()
    first = plan(obs, RNG)
    assert first.memory.history == ()  # Running/Running was already the state
    # The message moves (a node problem is said), the phase and reason do not: nothing added.
    later = replace(
        obs,
        now=NOW + timedelta(seconds=5),
        driver=replace(obs.driver, node="n1", node_problem="Ready=Unknown", node_problem_since=NOW),  # type: ignore[arg-type]
    )
    moved = plan(later, RNG)
    assert moved.memory.message != obs.memory.message
    assert moved.memory.history == ()


def test_a_phase_change_and_a_reason_change_each_append_one() -> None:
    starting = Memory(phase=Phase.STARTING, epoch=1, reason="Launch")
    obs = _obs(starting, _pod("Running", 1), annotation=1)
    running = plan(obs, RNG).memory
    assert [(t.phase, t.reason, t.epoch) for t in running.history] == [("Running", "Running", 1)]
    # Same phase (Running), another reason: an invalid edit the driver survives.
    invalid = replace(obs, memory=running, spec=None, spec_error="spec.x: bad")
    kept = plan(invalid, RNG).memory
    assert (kept.phase, kept.reason) == (Phase.RUNNING, "InvalidSpec")
    assert [(t.phase, t.reason) for t in kept.history] == [
        ("Running", "Running"),
        ("Running", "InvalidSpec"),
    ]
    # Asked again with the same invalid spec: nothing more.
    assert plan(replace(invalid, memory=kept), RNG).memory.history == kept.history


def test_history_keeps_the_newest_ten_oldest_first() -> None:
    old = tuple(
        Transition(NOW - timedelta(minutes=20 - i), "Backoff", f"R{i}", "", i)
        for i in range(HISTORY_MAX)
    )
    result = plan(_obs(Memory(phase=Phase.PENDING, history=old)), RNG)
    history = result.memory.history
    assert len(history) == HISTORY_MAX
    assert history[0] == old[1]  # the oldest one went
    assert (history[-1].phase, history[-1].reason, history[-1].time) == ("Starting", "Launch", NOW)


def test_a_long_message_is_cut_to_200_characters() -> None:
    pod = _pod("Failed", 1, exit_code=1, message="x" * 5000)
    obs = _obs(Memory(phase=Phase.RUNNING, epoch=1, reason="Running"), pod, annotation=1)
    result = plan(obs, RNG)
    entry = result.memory.history[-1]
    assert (entry.phase, entry.reason) == ("Backoff", "DriverFailed")
    assert len(result.memory.message) > HISTORY_MESSAGE_MAX
    assert len(entry.message) == HISTORY_MESSAGE_MAX
    assert entry.message.endswith("...")
    assert result.memory.message.startswith(entry.message[:-3])


# --- lastStable ------------------------------------------------------------------------------


def test_a_running_driver_that_decided_nothing_of_its_own_is_not_stable() -> None:
    # No decision read yet, and a decision of the driver before it (epoch 1): neither counts.
    assert plan(_running(epoch=2)[0], RNG).memory.last_stable is None
    assert plan(_running(epoch=2, decided=1)[0], RNG).memory.last_stable is None


def test_a_pending_driver_is_not_stable_whatever_the_decision_log_says() -> None:
    pod = _pod("Pending", 2, generation=4)
    obs = replace(_obs(Memory(epoch=2), pod, annotation=2), decided_epoch=2)
    assert plan(obs, RNG).memory.last_stable is None


def test_running_and_a_batch_decided_with_its_epoch_records_its_spec() -> None:
    obs, _ = _running(epoch=2, decided=2, pod_generation=4, spec_hash="h1")
    result = plan(obs, RNG)
    assert result.memory.last_stable == Stable("h1", 4, NOW)
    # Seen again later: the same spec, recorded once (since stays).
    again = plan(replace(obs, now=NOW + timedelta(minutes=1), memory=result.memory), RNG)
    assert again.memory.last_stable == Stable("h1", 4, NOW)


def test_a_failing_new_spec_leaves_the_last_stable_one() -> None:
    before = Stable("h1", 4, NOW - timedelta(hours=1))
    # The edit: generation 5, hash h2; its driver runs but decides nothing of its own...
    obs = replace(
        _obs(
            Memory(phase=Phase.STARTING, epoch=3, reason="Relaunch", last_stable=before),
            _pod("Running", 3, generation=5, spec_hash="h2"),
            annotation=3,
            spec_hash="h2",
            generation=5,
        ),
        decided_epoch=2,
    )
    running = plan(obs, RNG)
    assert running.memory.last_stable == before
    # ... and then fails: Backoff, then CrashLoop; lastStable stays the old spec throughout.
    failed = replace(
        obs,
        memory=running.memory,
        driver=_pod("Failed", 3, generation=5, spec_hash="h2", exit_code=1),
    )
    backoff = plan(failed, RNG)
    assert backoff.memory.phase is Phase.BACKOFF
    assert backoff.memory.last_stable == before
    relaunched = _pod("Failed", 4, generation=5, spec_hash="h2", exit_code=1)
    again = replace(backoff.memory, restarts=2, epoch=4)
    crashloop = plan(replace(failed, memory=again, driver=relaunched, annotation_epoch=4), RNG)
    assert crashloop.memory.phase is Phase.FAILED
    assert crashloop.memory.last_stable == before
    # An invalid edit afterwards does not clear it either.
    invalid = replace(failed, memory=crashloop.memory, spec=None, spec_error="bad", driver=None)
    assert plan(invalid, RNG).memory.last_stable == before


def test_a_stable_new_spec_replaces_the_old_one() -> None:
    before = Stable("h1", 4, NOW - timedelta(hours=1))
    obs, _ = _running(epoch=3, decided=3, pod_generation=5, spec_hash="h2")
    obs = replace(obs, memory=replace(obs.memory, last_stable=before), spec_hash="h2")
    assert plan(obs, RNG).memory.last_stable == Stable("h2", 5, NOW)


def test_a_driver_being_stopped_for_a_spec_change_that_decided_is_still_recorded() -> None:
    obs, _ = _running(epoch=2, decided=2, pod_generation=4, spec_hash="h1")
    result = plan(replace(obs, spec_hash="h2", generation=5), RNG)
    assert result.actions[0].kind is Kind.DELETE_POD
    assert result.memory.last_stable == Stable("h1", 4, NOW)


# --- through status --------------------------------------------------------------------------


def test_history_last_stable_and_driver_generation_round_trip_through_status() -> None:
    obs, _ = _running(epoch=2, decided=2, pod_generation=4, spec_hash="h1")
    memory = replace(
        plan(obs, RNG).memory,
        history=(
            Transition(NOW, "Starting", "Launch", "launching", 2),
            Transition(NOW, "Running", "Running", "up", None),
        ),
    )
    status = status_from(memory, obs, {})
    assert status["driverGeneration"] == 4
    assert status["lastStable"] == {
        "specHash": "h1",
        "generation": 4,
        "since": "2026-11-22T12:00:00+00:00",
    }
    # No null inside (a merge patch would delete the key and the next read would differ).
    assert status["history"][1] == {
        "time": "2026-11-22T12:00:00+00:00",
        "phase": "Running",
        "reason": "Running",
        "message": "up",
    }
    back = memory_from_status(status)
    assert (back.last_stable, back.history) == (memory.last_stable, memory.history)
    assert status_from(back, obs, status)["history"] == status["history"]
