"""Rule 2 for a lost node: a driver whose node is not Ready past the operator's grace is
fenced, force-deleted and relaunched; within the grace it is waited for and status says so.
Also the observation side: which pods get their node read, and what the node says."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from eo_operator.planner import Kind, Memory, Phase, plan
from eo_operator.reconciler import node_problem, suspect_node
from tests.operator.test_planner import NOW, _kinds, _obs, _pod, _spec

GRACE = timedelta(seconds=30)
UNKNOWN = "Ready=Unknown (NodeStatusUnknown: Kubelet stopped posting node status.)"


def _on_lost_node(seconds_ago: float, **kw: Any) -> Any:
    return _pod(
        node="node-a",
        node_problem=UNKNOWN,
        node_problem_since=NOW - timedelta(seconds=seconds_ago),
        **kw,
    )


def test_a_driver_whose_node_is_not_ready_past_the_grace_is_fenced_and_relaunched() -> None:
    obs = replace(
        _obs(Memory(phase=Phase.RUNNING, epoch=1), _on_lost_node(31), annotation=1),
        node_lost_grace=GRACE,
    )
    result = plan(obs)
    assert _kinds(result) == [Kind.RECOVER, Kind.FORCE_DELETE_POD, Kind.LAUNCH, Kind.EVENT]
    assert result.actions[0].epoch == result.actions[2].epoch == 2
    assert result.memory.phase is Phase.RECOVERING and result.memory.restarts == 1
    assert result.memory.reason == "DriverLost"
    assert "its node node-a is Ready=Unknown" in result.memory.message
    assert result.memory.failure is not None and "node-a" in result.memory.failure.message


def test_a_driver_whose_node_is_not_ready_within_the_grace_is_waited_for() -> None:
    obs = replace(
        _obs(Memory(phase=Phase.RUNNING, epoch=1), _on_lost_node(20), annotation=1),
        node_lost_grace=GRACE,
    )
    result = plan(obs)
    assert result.actions == [] and result.memory.phase is Phase.RUNNING
    assert "node-a is Ready=Unknown" in result.memory.message
    deadline = (NOW + timedelta(seconds=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f"replaced at {deadline} unless the node recovers" in result.memory.message
    assert result.requeue_seconds <= 10


def test_the_wait_for_a_lost_node_says_the_same_on_every_pass() -> None:
    """Status is patched only when it changes: a countdown would write it on every pass of the
    grace; the deadline does not change."""
    first = replace(
        _obs(Memory(phase=Phase.RUNNING, epoch=1), _on_lost_node(12), annotation=1),
        node_lost_grace=GRACE,
    )
    later = replace(first, now=NOW + timedelta(seconds=5))
    assert plan(first).memory.message == plan(later).memory.message


def test_the_grace_is_the_operators_setting() -> None:
    obs = _obs(Memory(phase=Phase.RUNNING, epoch=1), _on_lost_node(6), annotation=1)
    assert plan(replace(obs, node_lost_grace=timedelta(seconds=5))).memory.reason == "DriverLost"
    assert plan(replace(obs, node_lost_grace=timedelta(seconds=60))).actions == []


def test_a_driver_on_a_lost_node_is_counted_once_while_its_recovery_is_retried() -> None:
    obs = replace(
        _obs(Memory(phase=Phase.RUNNING, epoch=1), _on_lost_node(40), annotation=1),
        node_lost_grace=GRACE,
    )
    first = plan(obs)
    # The recovery failed (sink down): the pod is still there next pass, epoch 2 reserved.
    again = plan(replace(obs, memory=first.memory, annotation_epoch=2))
    assert again.memory.restarts == 1
    assert [a.epoch for a in again.actions if a.kind is Kind.RECOVER] == [2]
    assert Kind.EVENT not in _kinds(again)


def test_a_terminating_driver_on_a_lost_node_is_replaced_without_waiting_for_its_grace() -> None:
    # The taint eviction deleted it (graceful): on a lost node it would stay Terminating for as
    # long as the node is away; the node's state decides, not the 60 s + 30 s stuck rule.
    evicted = _on_lost_node(31, deleting_since=NOW - timedelta(seconds=1), grace_seconds=60)
    obs = replace(
        _obs(Memory(phase=Phase.RUNNING, epoch=1), evicted, annotation=1),
        node_lost_grace=GRACE,
    )
    assert _kinds(plan(obs))[:3] == [Kind.RECOVER, Kind.FORCE_DELETE_POD, Kind.LAUNCH]


def test_a_suspended_pipelines_driver_on_a_lost_node_is_fenced_and_nothing_launched() -> None:
    obs = replace(
        _obs(
            Memory(phase=Phase.STOPPING, epoch=1),
            _on_lost_node(31, deleting_since=NOW - timedelta(seconds=20)),
            spec=_spec(suspend=True),
            annotation=1,
        ),
        node_lost_grace=GRACE,
    )
    result = plan(obs)
    assert _kinds(result)[:2] == [Kind.RECOVER, Kind.FORCE_DELETE_POD]
    assert Kind.LAUNCH not in _kinds(result) and result.memory.restarts == 0


def test_a_driver_whose_node_is_gone_is_lost_at_once() -> None:
    gone = _pod(node="node-a", node_problem="gone", node_problem_since=None)
    result = plan(_obs(Memory(phase=Phase.RUNNING, epoch=1), gone, annotation=1))
    assert _kinds(result)[:3] == [Kind.RECOVER, Kind.FORCE_DELETE_POD, Kind.LAUNCH]
    assert "its node node-a is gone" in result.memory.message


def test_an_exited_driver_on_a_lost_node_is_an_ordinary_exit() -> None:
    exited = _on_lost_node(120, phase="Failed", exit_code=1, reason="Error")
    result = plan(_obs(Memory(phase=Phase.RUNNING, epoch=1), exited, annotation=1))
    assert result.memory.reason == "DriverFailed"
    assert Kind.FORCE_DELETE_POD not in _kinds(result)


def _pod_doc(phase: str = "Running", ready: str | None = "True", node: str = "n") -> dict[str, Any]:
    conditions = (
        []
        if ready is None
        else [{"type": "Ready", "status": ready, "lastTransitionTime": "2026-11-22T11:59:00Z"}]
    )
    return {
        "metadata": {"name": "p-driver-e1"},
        "spec": {"nodeName": node},
        "status": {"phase": phase, "conditions": conditions},
    }


def _node_doc(status: str, reason: str = "", message: str = "") -> dict[str, Any]:
    ready = {"type": "Ready", "status": status, "lastTransitionTime": "2026-11-22T11:59:30Z"}
    ready.update({k: v for k, v in (("reason", reason), ("message", message)) if v})
    return {"metadata": {"name": "n"}, "status": {"conditions": [ready]}}


def test_only_a_pod_that_should_run_but_is_not_ready_gets_its_node_read() -> None:
    assert suspect_node(_pod_doc(ready="True")) is None
    assert suspect_node(_pod_doc(ready="False")) == "n"
    assert suspect_node(_pod_doc("Pending", ready=None)) == "n"
    assert suspect_node(_pod_doc("Pending", ready=None, node="")) is None
    assert suspect_node(_pod_doc("Failed", ready="False")) is None


def test_the_nodes_ready_condition_says_what_is_wrong_and_since_when() -> None:
    pod = _pod_doc(ready="False")
    problem, since = node_problem(
        pod, _node_doc("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
    )
    assert problem == UNKNOWN
    assert since is not None and since.isoformat() == "2026-11-22T11:59:30+00:00"
    assert node_problem(pod, _node_doc("False", "KubeletNotReady"))[0] == (
        "Ready=False (KubeletNotReady)"
    )
    assert node_problem(pod, _node_doc("True")) == ("", None)


def test_a_node_object_that_is_gone_counts_from_the_pods_ready_transition() -> None:
    problem, since = node_problem(_pod_doc(ready="False"), None)
    assert problem == "gone"
    assert since is not None and since.isoformat() == "2026-11-22T11:59:00+00:00"
    assert node_problem(_pod_doc("Pending", ready=None), None) == ("gone", None)


DISRUPTION = "none of the cluster's 2 nodes is Ready (a cluster-wide disruption)"


def test_a_lost_node_during_a_disruption_is_neither_fenced_nor_replaced_and_said_once() -> None:
    obs = replace(
        _obs(Memory(phase=Phase.RUNNING, epoch=1), _on_lost_node(300), annotation=1),
        node_lost_grace=GRACE,
        node_disruption=DISRUPTION,
    )
    first = plan(obs)
    assert _kinds(first) == [Kind.EVENT]
    assert first.actions[0].reason == "NodeDisruption" and first.actions[0].warning
    assert first.memory.phase is Phase.RUNNING and first.memory.restarts == 0
    assert first.memory.reason == "NodeDisruption"
    assert DISRUPTION in first.memory.message and "node-a is Ready=Unknown" in first.memory.message
    again = plan(replace(obs, memory=first.memory, now=NOW + timedelta(seconds=10)))
    assert again.actions == [] and again.memory.reason == "NodeDisruption"


def test_when_the_disruption_ends_a_still_lost_node_is_replaced_at_once() -> None:
    held = plan(
        replace(
            _obs(Memory(phase=Phase.RUNNING, epoch=1), _on_lost_node(300), annotation=1),
            node_lost_grace=GRACE,
            node_disruption=DISRUPTION,
        )
    )
    over = replace(_obs(held.memory, _on_lost_node(310), annotation=1), node_lost_grace=GRACE)
    assert _kinds(plan(over))[:2] == [Kind.RECOVER, Kind.FORCE_DELETE_POD]


def test_a_driver_stuck_terminating_on_a_ready_node_is_replaced_despite_a_disruption() -> None:
    stuck = _pod(deleting_since=NOW - timedelta(seconds=600), grace_seconds=30)
    obs = replace(
        _obs(Memory(phase=Phase.RUNNING, epoch=1), stuck, annotation=1),
        node_disruption=DISRUPTION,
    )
    assert Kind.FORCE_DELETE_POD in _kinds(plan(obs))


def test_a_starting_driver_held_by_a_disruption_says_launched_once_it_is_over() -> None:
    pending = _pod(phase="Pending", node="node-a")
    held = Memory(phase=Phase.STARTING, epoch=1, reason="NodeDisruption", message="held")
    result = plan(_obs(held, pending, annotation=1))
    assert result.memory.reason == "Launched" and result.memory.phase is Phase.STARTING
