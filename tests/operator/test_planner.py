"""The planner's state machine, edge by edge (no I/O: plain data in, plan out)."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from eo_jobs.protocol.errors import (
    EXIT_CHECKPOINT_RESET,
    EXIT_FENCED,
    EXIT_LIFECYCLE_REFUSED,
    EXIT_SINK_CONTRACT,
)
from eo_jobs.spec import parse_pipeline
from eo_jobs.spec.models import PipelineSpec
from eo_operator.planner import (
    DriverPod,
    Kind,
    Memory,
    Observation,
    Phase,
    backoff_seconds,
    next_epoch,
    plan,
)
from eo_operator.resources import spec_hash

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def _spec(**extra: object) -> PipelineSpec:
    spec = {
        "source": {"files": {"path": "/in", "format": "json", "schema": "id BIGINT"}},
        "sinks": [
            {
                "name": "s",
                "postgres": {
                    "dsn": {"secretKeyRef": {"name": "db", "key": "dsn"}},
                    "table": "public.t",
                },
            }
        ],
        "checkpoint": {"location": "/ckpt"},
        "restartPolicy": {
            "maxRestarts": 2,
            "backoffSeconds": 10,
            "maxBackoffSeconds": 60,
            "windowSeconds": 600,
        },
        **extra,
    }
    doc = {
        "apiVersion": "eo.dev/v1alpha1",
        "kind": "ExactlyOncePipeline",
        "metadata": {"name": "p"},
        "spec": spec,
    }
    return parse_pipeline(doc).spec


def _obs(
    memory: Memory | None = None,
    driver: DriverPod | None = None,
    *,
    spec: PipelineSpec | None = None,
    annotation: int | None = None,
    spec_hash: str = "h1",
    generation: int = 1,
    invalid: bool = False,
) -> Observation:
    return Observation(
        now=NOW,
        generation=generation,
        spec=None if invalid else (spec or _spec()),
        spec_error="spec.x: bad" if invalid else None,
        spec_hash=spec_hash,
        annotation_epoch=annotation,
        memory=memory or Memory(),
        driver=driver,
    )


def _pod(phase: str = "Running", epoch: int = 1, **kw: Any) -> DriverPod:
    return DriverPod(
        name=f"p-driver-e{epoch}",
        epoch=epoch,
        phase=phase,
        spec_hash=str(kw.pop("spec_hash", "h1")),
        **kw,
    )


def _kinds(p: object) -> list[Kind]:
    return [a.kind for a in p.actions]  # type: ignore[attr-defined]


def test_a_new_pipeline_is_fenced_recovered_and_launched_with_epoch_1() -> None:
    result = plan(_obs())
    assert result.memory.phase is Phase.STARTING
    assert _kinds(result)[:2] == [Kind.RECOVER, Kind.LAUNCH]
    assert result.actions[0].epoch == result.actions[1].epoch == 1


def test_an_epoch_reserved_by_an_interrupted_recovery_is_reused_not_bumped_again() -> None:
    obs = _obs(Memory(phase=Phase.STARTING, epoch=3), annotation=4)
    assert next_epoch(obs) == 4
    result = plan(obs)
    assert result.actions[0].kind is Kind.RECOVER and result.actions[0].epoch == 4
    assert result.memory.restarts == 0


def test_a_running_driver_of_the_current_epoch_means_running() -> None:
    result = plan(_obs(Memory(phase=Phase.STARTING, epoch=1), _pod(), annotation=1))
    assert result.memory.phase is Phase.RUNNING
    assert result.actions == []


def test_a_pending_driver_means_starting() -> None:
    result = plan(_obs(Memory(epoch=1), _pod("Pending"), annotation=1))
    assert result.memory.phase is Phase.STARTING


def test_a_failed_driver_is_kept_counted_and_backed_off() -> None:
    result = plan(
        _obs(Memory(phase=Phase.RUNNING, epoch=1), _pod("Failed", exit_code=1), annotation=1),
        random.Random(1),
    )
    assert result.memory.phase is Phase.BACKOFF
    assert result.memory.restarts == 1
    assert _kinds(result) == [Kind.EVENT]
    assert result.memory.backoff_until is not None and result.memory.backoff_until > NOW


def test_backoff_doubles_per_failure_is_capped_and_jittered() -> None:
    spec = _spec()
    rng = random.Random(3)
    assert 8 <= backoff_seconds(spec, 1, rng) <= 12
    assert 16 <= backoff_seconds(spec, 2, rng) <= 24
    assert 48 <= backoff_seconds(spec, 10, rng) <= 72


def test_after_the_backoff_the_driver_is_relaunched_with_a_new_epoch() -> None:
    mem = Memory(
        phase=Phase.BACKOFF,
        epoch=1,
        restarts=1,
        last_failure=NOW,
        backoff_until=NOW - timedelta(seconds=1),
    )
    result = plan(_obs(mem, annotation=1))
    assert _kinds(result)[:2] == [Kind.RECOVER, Kind.LAUNCH]
    assert result.actions[0].epoch == 2


def test_during_the_backoff_nothing_happens() -> None:
    mem = Memory(phase=Phase.BACKOFF, epoch=1, restarts=1, backoff_until=NOW + timedelta(seconds=5))
    result = plan(_obs(mem, annotation=1))
    assert result.actions == [] and result.memory.phase is Phase.BACKOFF


def test_too_many_restarts_in_the_window_fail_the_pipeline() -> None:
    mem = Memory(phase=Phase.RUNNING, epoch=3, restarts=2, last_failure=NOW - timedelta(seconds=60))
    result = plan(_obs(mem, _pod("Failed", epoch=3, exit_code=1), annotation=3))
    assert result.memory.phase is Phase.FAILED
    assert result.memory.reason == "CrashLoop"


def test_a_failure_after_a_quiet_window_starts_the_count_again() -> None:
    mem = Memory(
        phase=Phase.RUNNING, epoch=3, restarts=2, last_failure=NOW - timedelta(seconds=3600)
    )
    result = plan(_obs(mem, _pod("Failed", epoch=3, exit_code=1), annotation=3))
    assert result.memory.phase is Phase.BACKOFF and result.memory.restarts == 1


def test_a_fenced_exit_relaunches_above_the_fence_without_counting_a_crash() -> None:
    mem = Memory(phase=Phase.RUNNING, epoch=2, restarts=1)
    result = plan(_obs(mem, _pod("Failed", epoch=2, exit_code=EXIT_FENCED), annotation=2))
    assert result.memory.restarts == 1
    assert Kind.LAUNCH in _kinds(result)
    assert [a.epoch for a in result.actions if a.kind is Kind.RECOVER] == [3]
    assert [a.pod for a in result.actions if a.kind is Kind.DELETE_POD] == ["p-driver-e2"]


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (EXIT_CHECKPOINT_RESET, "CheckpointReset"),
        (EXIT_SINK_CONTRACT, "SinkContract"),
        (EXIT_LIFECYCLE_REFUSED, "StartOverRefused"),
    ],
)
def test_permanent_driver_errors_fail_without_a_restart_storm(code: int, reason: str) -> None:
    result = plan(
        _obs(Memory(phase=Phase.RUNNING, epoch=1), _pod("Failed", exit_code=code), annotation=1)
    )
    assert result.memory.phase is Phase.FAILED and result.memory.reason == reason
    assert Kind.LAUNCH not in _kinds(result)
    again = plan(_obs(result.memory, None, annotation=1))
    assert again.actions == []


def test_a_spec_change_after_a_permanent_failure_retries() -> None:
    failed = Memory(phase=Phase.FAILED, epoch=1, failed_generation=1, reason="SinkContract")
    result = plan(_obs(failed, None, annotation=1, generation=2))
    assert Kind.LAUNCH in _kinds(result)


def test_a_driver_that_vanished_while_running_counts_as_a_failure() -> None:
    result = plan(_obs(Memory(phase=Phase.RUNNING, epoch=1), None, annotation=1))
    assert result.memory.phase is Phase.BACKOFF and result.memory.restarts == 1


def test_a_lost_node_is_fenced_before_the_pod_is_force_deleted_and_relaunched() -> None:
    result = plan(_obs(Memory(phase=Phase.RUNNING, epoch=1), _pod("Unknown"), annotation=1))
    assert _kinds(result)[:3] == [Kind.RECOVER, Kind.FORCE_DELETE_POD, Kind.LAUNCH]
    assert result.actions[0].epoch == 2


def test_a_pod_stuck_terminating_is_treated_as_lost() -> None:
    stuck = _pod(deleting_since=NOW - timedelta(seconds=200), grace_seconds=60)
    result = plan(_obs(Memory(phase=Phase.STOPPING, epoch=1), stuck, annotation=1))
    assert _kinds(result)[:2] == [Kind.RECOVER, Kind.FORCE_DELETE_POD]


def test_a_pod_terminating_within_its_grace_is_waited_for() -> None:
    leaving = _pod(deleting_since=NOW - timedelta(seconds=10), grace_seconds=60)
    result = plan(_obs(Memory(phase=Phase.STOPPING, epoch=1), leaving, annotation=1))
    assert result.actions == [] and result.memory.phase is Phase.STOPPING


def test_a_spec_change_stops_the_driver_gracefully_then_relaunches() -> None:
    result = plan(
        _obs(
            Memory(phase=Phase.RUNNING, epoch=1),
            _pod(spec_hash="old"),
            annotation=1,
            spec_hash="new",
        )
    )
    assert result.memory.phase is Phase.STOPPING
    assert _kinds(result)[0] is Kind.DELETE_POD


def test_suspend_stops_the_driver_then_recovers_then_stays_suspended() -> None:
    spec = _spec(suspend=True)
    stopping = plan(_obs(Memory(phase=Phase.RUNNING, epoch=1), _pod(), spec=spec, annotation=1))
    assert stopping.memory.phase is Phase.STOPPING
    assert _kinds(stopping)[0] is Kind.DELETE_POD
    suspended = plan(_obs(stopping.memory, None, spec=spec, annotation=1))
    assert suspended.memory.phase is Phase.SUSPENDED
    assert [a.epoch for a in suspended.actions if a.kind is Kind.RECOVER] == [2]
    # The reconciler records status.recoveredEpoch once that recovery finished.
    done = replace(suspended.memory, recovered_epoch=2)
    assert plan(_obs(done, None, spec=spec, annotation=2)).actions == []


def test_a_suspend_whose_recovery_did_not_finish_plans_it_again() -> None:
    spec = _spec(suspend=True)
    unfinished = Memory(phase=Phase.SUSPENDED, epoch=1, recovered_epoch=1)
    again = plan(_obs(unfinished, None, spec=spec, annotation=2))
    assert [a.epoch for a in again.actions if a.kind is Kind.RECOVER] == [2]


def test_resuming_relaunches_with_the_epoch_reserved_by_the_suspend() -> None:
    mem = Memory(phase=Phase.SUSPENDED, epoch=1)
    result = plan(_obs(mem, None, annotation=2))
    assert [a.epoch for a in result.actions if a.kind is Kind.LAUNCH] == [2]


def test_an_invalid_spec_without_a_live_driver_fails_with_a_warning_event_once() -> None:
    result = plan(_obs(Memory(phase=Phase.BACKOFF, epoch=1), None, invalid=True))
    assert result.memory.phase is Phase.FAILED and result.memory.reason == "InvalidSpec"
    assert _kinds(result) == [Kind.EVENT]
    assert result.actions[0].warning
    again = plan(_obs(result.memory, None, invalid=True))
    assert again.actions == []


def test_an_invalid_edit_keeps_the_running_driver_on_its_last_good_spec_and_says_so() -> None:
    """Issue 32 item 3 (review operator-2 N3): an edit the API server accepts but eo refuses
    used to stop the running driver (rule 1); the driver now keeps the spec it started with."""
    running = Memory(phase=Phase.RUNNING, epoch=1)
    result = plan(_obs(running, _pod(), invalid=True, annotation=1, generation=2))
    assert result.memory.phase is Phase.RUNNING and result.memory.reason == "InvalidSpec"
    assert "keeps running the last valid spec" in result.memory.message
    assert _kinds(result) == [Kind.EVENT] and result.actions[0].warning
    # The next pass says nothing new; another wrong edit gets its own event.
    again = plan(_obs(result.memory, _pod(), invalid=True, annotation=1, generation=2))
    assert again.actions == [] and again.memory.phase is Phase.RUNNING
    other = replace(_obs(result.memory, _pod(), invalid=True, annotation=1), spec_error="y: bad")
    assert _kinds(plan(other)) == [Kind.EVENT]


def test_a_valid_spec_again_clears_the_reason_and_restarts_only_if_it_differs() -> None:
    kept = Memory(phase=Phase.RUNNING, epoch=1, reason="InvalidSpec", message="x")
    reverted = plan(_obs(kept, _pod(spec_hash="h1"), annotation=1, spec_hash="h1"))
    assert reverted.actions == [] and reverted.memory.reason == "Running"
    edited = plan(_obs(kept, _pod(spec_hash="h1"), annotation=1, spec_hash="h2"))
    assert edited.memory.phase is Phase.STOPPING  # rule 6: a batch-boundary restart
    assert Kind.DELETE_POD in _kinds(edited)


def test_an_invalid_spec_still_stops_nothing_but_a_driver_that_already_exited() -> None:
    running = Memory(phase=Phase.RUNNING, epoch=1, reason="InvalidSpec", message="x")
    exited = _pod(phase="Failed", epoch=1, exit_code=1)
    result = plan(_obs(running, exited, invalid=True, annotation=1))
    assert result.memory.phase is Phase.FAILED


def test_a_leftover_pod_of_an_older_epoch_is_deleted() -> None:
    result = plan(_obs(Memory(phase=Phase.RUNNING, epoch=3), _pod(epoch=2), annotation=3))
    assert _kinds(result) == [Kind.DELETE_POD]


def test_running_long_enough_after_a_failure_resets_the_restart_counter() -> None:
    mem = Memory(phase=Phase.RUNNING, epoch=2, restarts=2, last_failure=NOW - timedelta(hours=2))
    assert plan(_obs(mem, _pod(epoch=2), annotation=2)).memory.restarts == 0
    recent = replace(mem, last_failure=NOW - timedelta(seconds=30))
    assert plan(_obs(recent, _pod(epoch=2), annotation=2)).memory.restarts == 2


def test_a_relaunch_that_never_happened_is_retried_without_counting_a_restart() -> None:
    # Status said Starting (plan recorded) but the launch was interrupted: no pod exists.
    mem = Memory(phase=Phase.STARTING, epoch=1, restarts=0)
    result = plan(_obs(mem, None, annotation=2))
    assert result.memory.restarts == 0
    assert [a.epoch for a in result.actions if a.kind is Kind.LAUNCH] == [2]


def test_a_changed_restart_nonce_is_a_spec_change_and_counts_no_restart() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "orders-ledger.yaml"
    doc = yaml.safe_load(example.read_text())
    before = spec_hash(parse_pipeline(doc), "eo-job:test")
    doc["spec"]["restartNonce"] = 1
    after = spec_hash(parse_pipeline(doc), "eo-job:test")
    assert before != after

    memory = Memory(phase=Phase.RUNNING, epoch=1)
    result = plan(_obs(memory, _pod(spec_hash=before), annotation=1, spec_hash=after))

    assert result.memory.phase is Phase.STOPPING
    assert _kinds(result)[0] is Kind.DELETE_POD
    assert result.memory.restarts == memory.restarts
