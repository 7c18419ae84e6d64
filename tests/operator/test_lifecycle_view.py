"""What the operator shows of spec.lifecycle from the control database's records: the kept
snapshots and the last start-over in status, a Lifecycle condition that is False while an
action is asked for and not done (or refused), and one event per new record."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from eo_jobs.protocol.control_api import LifecycleRecord
from eo_jobs.spec import parse_pipeline
from eo_jobs.spec.models import PipelineSpec
from eo_operator.lifecycle import view
from eo_operator.planner import Memory, Phase, plan
from eo_operator.status import status_from
from tests.operator.test_planner import _obs, _pod
from tests.support.pipelines import document

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def _spec(**lifecycle: Any) -> PipelineSpec:
    return parse_pipeline(document(lifecycle=lifecycle) if lifecycle else document()).spec


def _snapshot(nonce: str, *, pruned: bool = False, minute: int = 0) -> LifecycleRecord:
    return LifecycleRecord(
        "pay/p",
        "snapshot",
        nonce,
        f"snapshot-{nonce}",
        3,
        {"queryId": "q1", "lastDecidedBatch": 7, "lastDecidedEpoch": 2, "lastCommittedBatch": 7},
        T0.replace(minute=minute),
        T0 if pruned else None,
    )


def _start_over(nonce: str) -> LifecycleRecord:
    return LifecycleRecord(
        "pay/p",
        "start-over",
        nonce,
        f"start-over-{nonce}",
        4,
        {"queryId": "q1", "forgottenQueries": ["q1"], "forgottenDecisions": 8},
        T0.replace(minute=30),
    )


def test_a_pipeline_without_lifecycle_shows_nothing() -> None:
    shown = view(_spec(), [], {})
    assert (shown.status, shown.condition, shown.events) == (None, None, [])


def test_an_asked_snapshot_not_taken_yet_is_pending() -> None:
    shown = view(_spec(snapshot={"nonce": "a"}), [], {})
    assert shown.condition is not None
    ok, reason, message = shown.condition
    assert (ok, reason) == (False, "SnapshotPending") and "batch boundary" in message
    assert shown.status == {"snapshots": [], "startOver": None}


def test_a_taken_snapshot_is_listed_with_its_position_and_announced_once() -> None:
    spec = _spec(snapshot={"nonce": "a"})
    shown = view(spec, [_snapshot("a")], {})
    assert shown.status is not None
    assert shown.status["snapshots"] == [
        {
            "name": "snapshot-a",
            "kind": "snapshot",
            "nonce": "a",
            "takenAt": T0.isoformat(),
            "epoch": 3,
            "queryId": "q1",
            "lastDecidedBatch": 7,
            "lastDecidedEpoch": 2,
            "lastCommittedBatch": 7,
        }
    ]
    assert shown.condition is not None and shown.condition[:2] == (True, "Done")
    assert [reason for reason, _ in shown.events] == ["SnapshotTaken"]
    again = view(spec, [_snapshot("a")], {"lifecycle": shown.status})
    assert again.events == []


def test_pruned_snapshots_are_not_listed() -> None:
    records = [_snapshot("a", pruned=True), _snapshot("b", minute=1)]
    shown = view(_spec(snapshot={"nonce": "b"}), records, {})
    assert shown.status is not None
    assert [s["name"] for s in shown.status["snapshots"]] == ["snapshot-b"]


def test_a_start_over_shows_what_it_forgot_and_the_sink_rows_staying() -> None:
    shown = view(_spec(startOver={"nonce": "n"}), [_start_over("n")], {})
    assert shown.status is not None
    assert shown.status["startOver"] == {
        "nonce": "n",
        "time": T0.replace(minute=30).isoformat(),
        "epoch": 4,
        "forgottenQueries": ["q1"],
        "forgottenDecisions": 8,
        "snapshot": "start-over-n",
    }
    (_, message), *_ = [e for e in shown.events if e[0] == "StartedOver"]
    assert "8 decisions" in message and "rows already written stay" in message


def test_a_refused_start_over_is_a_false_condition_with_the_drivers_words() -> None:
    shown = view(_spec(startOver={"nonce": "n"}), [], {}, refused="refusing to start over")
    assert shown.condition == (False, "StartOverRefused", "refusing to start over")


def test_a_driver_that_refused_a_start_over_sets_the_condition_in_the_same_pass() -> None:
    obs = _obs(Memory(phase=Phase.RUNNING, epoch=1), _pod("Failed", exit_code=79), annotation=1)
    result = plan(obs)
    assert result.memory.reason == "StartOverRefused"
    conds = status_from(result.memory, obs, {})["conditions"]
    (lifecycle,) = [c for c in conds if c["type"] == "Lifecycle"]
    assert (lifecycle["status"], lifecycle["reason"]) == ("False", "StartOverRefused")
