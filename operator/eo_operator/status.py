"""Status <-> planner memory, and Kubernetes-style conditions.

Status is a faithful record: the planner's bookkeeping (restarts, backoff, failures) lives in
it, so an operator restart resumes exactly where the previous one stopped, and users see in
``kubectl get eop`` / ``describe`` what the operator knows.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from eo_operator.blockers import DRIVER, FENCE, REASONS, SINK
from eo_operator.planner import (
    HISTORY_MAX,
    NODE_DISRUPTION,
    START_OVER_REFUSED,
    Blocked,
    Failure,
    Memory,
    Observation,
    Phase,
    RolledBack,
    Rollout,
    Stable,
    Transition,
    good_spec,
)


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 time of a status field or annotation; None when absent or not a time (a
    hand-edited status or annotation must not stop the reconcile)."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat() if value else None


def memory_from_status(status: dict[str, Any]) -> Memory:
    """Planner memory from the object's status."""
    try:
        phase = Phase(status.get("phase") or "Pending")
    except ValueError:
        phase = Phase.PENDING
    return Memory(
        phase=phase,
        epoch=status.get("epoch"),
        restarts=int(status.get("restarts") or 0),
        last_failure=parse_time(status.get("lastFailureTime")),
        backoff_until=parse_time(status.get("backoffUntil")),
        last_launch=parse_time(status.get("lastLaunchTime")),
        failed_generation=status.get("failedGeneration"),
        recovered_epoch=status.get("recoveredEpoch"),
        reason=status.get("reason") or "",
        message=status.get("message") or "",
        failure=_failure(status.get("lastFailure")),
        blocked=_blocked(status.get("conditions") or []),
        last_stable=_stable(status.get("lastStable")),
        history=_history(status.get("history")),
        rollout=_rollout(status.get("rollout")),
        rolled_back=_rolled_back(status.get("rolledBack")),
    )


def _rollout(recorded: Any) -> Rollout | None:
    if not isinstance(recorded, dict) or not recorded.get("specHash"):
        return None
    since = parse_time(recorded.get("since"))
    if since is None:
        return None
    generation = recorded.get("generation")
    return Rollout(
        str(recorded["specHash"]), generation if isinstance(generation, int) else None, since
    )


def _rolled_back(recorded: Any) -> RolledBack | None:
    if not isinstance(recorded, dict):
        return None
    source, target = recorded.get("fromGeneration"), recorded.get("toGeneration")
    if not isinstance(source, int) or not recorded.get("toSpecHash"):
        return None
    return RolledBack(
        from_generation=source,
        from_spec_hash=str(recorded.get("fromSpecHash") or ""),
        to_generation=target if isinstance(target, int) else None,
        to_spec_hash=str(recorded["toSpecHash"]),
        time=parse_time(recorded.get("time")) or datetime.now(UTC),
    )


def _stable(recorded: Any) -> Stable | None:
    if not isinstance(recorded, dict) or not recorded.get("specHash"):
        return None
    generation = recorded.get("generation")
    return Stable(
        spec_hash=str(recorded["specHash"]),
        generation=generation if isinstance(generation, int) else None,
        since=parse_time(recorded.get("since")) or datetime.now(UTC),
    )


def _history(recorded: Any) -> tuple[Transition, ...]:
    """status.history as transitions; an entry without a time or phase (a hand edit) is left
    out."""
    if not isinstance(recorded, list):
        return ()
    entries = []
    for item in recorded:
        when = parse_time(item.get("time")) if isinstance(item, dict) else None
        if when is None or not item.get("phase"):
            continue
        epoch = item.get("epoch")
        entries.append(
            Transition(
                time=when,
                phase=str(item["phase"]),
                reason=str(item.get("reason") or ""),
                message=str(item.get("message") or ""),
                epoch=epoch if isinstance(epoch, int) else None,
            )
        )
    return tuple(entries[-HISTORY_MAX:])


def _blocked(conds: list[dict[str, Any]]) -> Blocked | None:
    """The blocker a SinkReachable/DriverCreatable/FenceOwned condition records, since its
    transition."""
    for cond in conds:
        if (
            cond.get("type") in (SINK, DRIVER, FENCE)
            and cond.get("status") == "False"
            and cond.get("reason") in REASONS
        ):
            return Blocked(
                condition=str(cond["type"]),
                reason=str(cond["reason"]),
                message=str(cond.get("message") or ""),
                since=parse_time(cond.get("lastTransitionTime")) or datetime.now(UTC),
            )
    return None


def _failure(recorded: Any) -> Failure | None:
    if not isinstance(recorded, dict) or not recorded.get("pod"):
        return None
    return Failure(
        pod=str(recorded["pod"]),
        reason=str(recorded.get("reason") or ""),
        exit_code=recorded.get("exitCode"),
        message=str(recorded.get("message") or ""),
        time=parse_time(recorded.get("time")) or datetime.now(UTC),
    )


def conditions(
    status: dict[str, Any], kind: str, ok: bool, reason: str, message: str
) -> list[dict[str, Any]]:
    """Status conditions with ``kind`` set; lastTransitionTime moves only on a change."""
    value = "True" if ok else "False"
    out: list[dict[str, Any]] = []
    found = False
    for cond in status.get("conditions") or []:
        if cond.get("type") == kind:
            found = True
            changed = cond.get("status") != value
            out.append(
                {
                    "type": kind,
                    "status": value,
                    "reason": reason,
                    "message": message[:1000],
                    "lastTransitionTime": _iso(datetime.now(UTC))
                    if changed
                    else cond.get("lastTransitionTime"),
                }
            )
        else:
            out.append(cond)
    if not found:
        out.append(
            {
                "type": kind,
                "status": value,
                "reason": reason,
                "message": message[:1000],
                "lastTransitionTime": _iso(datetime.now(UTC)),
            }
        )
    return out


def _without_none(fields: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not None}


def _refusals(conds: dict[str, Any], memory: Memory, ready: bool) -> list[dict[str, Any]]:
    """The SinkContract condition, and Lifecycle=False for a refused start-over: set with the
    plan's reason, at once (a Failed pipeline's health passes, which set Lifecycle otherwise,
    are minutes apart)."""
    if memory.reason == "SinkContract":
        return conditions(conds, "SinkContract", False, "SinkContract", memory.message)
    if memory.reason == START_OVER_REFUSED:
        return conditions(conds, "Lifecycle", False, START_OVER_REFUSED, memory.message)
    if ready and any(c.get("type") == "SinkContract" for c in conds["conditions"]):
        return conditions(
            conds, "SinkContract", True, "Satisfied", "the driver checked the sink contract"
        )
    return list(conds["conditions"])


def status_from(memory: Memory, obs: Observation, current: dict[str, Any]) -> dict[str, Any]:
    """The status patch recorded before acting on a plan."""
    status: dict[str, Any] = {
        "phase": memory.phase.value,
        "restarts": memory.restarts,
        "lastFailureTime": _iso(memory.last_failure),
        "backoffUntil": _iso(memory.backoff_until),
        "failedGeneration": memory.failed_generation,
        "reason": memory.reason or None,
        "message": memory.message or None,
        "observedGeneration": obs.generation,
    }
    if memory.failure is not None:
        failure = memory.failure
        status["lastFailure"] = {
            "pod": failure.pod,
            "reason": failure.reason,
            "exitCode": failure.exit_code,
            "message": failure.message,
            "time": _iso(failure.time),
        }
    if memory.last_stable is not None:
        stable = memory.last_stable
        # No null inside: a merge patch would delete the key, and the status read back would
        # never equal the one written (a write on every pass).
        status["lastStable"] = _without_none(
            {
                "specHash": stable.spec_hash,
                "generation": stable.generation,
                "since": _iso(stable.since),
            }
        )
    rollout = memory.rollout
    status["rollout"] = (
        None
        if rollout is None
        else _without_none(
            {
                "specHash": rollout.spec_hash,
                "generation": rollout.generation,
                "since": _iso(rollout.since),
            }
        )
    )
    rolled = memory.rolled_back
    status["rolledBack"] = (
        None
        if rolled is None
        else _without_none(
            {
                "fromGeneration": rolled.from_generation,
                "fromSpecHash": rolled.from_spec_hash,
                "toGeneration": rolled.to_generation,
                "toSpecHash": rolled.to_spec_hash,
                "time": _iso(rolled.time),
            }
        )
    )
    if memory.history:
        # A list is replaced whole by a merge patch: the newest HISTORY_MAX, nothing older.
        status["history"] = [
            _without_none(
                {
                    "time": _iso(entry.time),
                    "phase": entry.phase,
                    "reason": entry.reason,
                    "message": entry.message,
                    "epoch": entry.epoch,
                }
            )
            for entry in memory.history
        ]
    if obs.spec is not None:
        status["guarantee"] = str(obs.spec.guarantee)
    if obs.driver is not None and obs.driver.phase in ("Pending", "Running"):
        status["epoch"] = obs.driver.epoch
        status["driverPod"] = obs.driver.name
        status["driverSpecHash"] = obs.driver.spec_hash or None
        status["driverGeneration"] = obs.driver.generation
    conds = {"conditions": current.get("conditions") or []}
    refused = obs.spec_error or "invalid"
    if obs.last_good is not None:
        refused = f"{refused}; eo runs {good_spec(obs.last_good)} until a valid edit"
    conds["conditions"] = conditions(
        conds,
        "SpecValid",
        obs.spec is not None,
        "Valid" if obs.spec is not None else "InvalidSpec",
        "spec accepted" if obs.spec is not None else refused,
    )
    ready = memory.phase is Phase.RUNNING
    conds["conditions"] = conditions(
        conds, "Ready", ready, memory.phase.value, memory.message or memory.phase.value
    )
    progressing = memory.phase in (Phase.STARTING, Phase.RUNNING, Phase.RECOVERING)
    conds["conditions"] = conditions(
        conds,
        "Progressing",
        progressing,
        memory.reason or memory.phase.value,
        memory.message or memory.phase.value,
    )
    conds["conditions"] = _refusals(conds, memory, ready)
    if memory.reason == NODE_DISRUPTION:
        conds["conditions"] = conditions(
            conds, NODE_DISRUPTION, True, "NodesNotReady", memory.message
        )
    elif any(c.get("type") == NODE_DISRUPTION for c in conds["conditions"]):
        conds["conditions"] = conditions(
            conds, NODE_DISRUPTION, False, "Over", "no disruption holds the driver's replacement"
        )
    if rolled is not None:
        to = "" if rolled.to_generation is None else f"generation {rolled.to_generation}, "
        conds["conditions"] = conditions(
            conds,
            "RolledBack",
            True,
            "RolledBack",
            f"generation {rolled.from_generation} (spec hash {rolled.from_spec_hash}) did not "
            f"run stable within restartPolicy.rollbackAfterSeconds: the last stable spec "
            f"({to}spec hash {rolled.to_spec_hash}) runs until the spec is edited",
        )
    elif any(c.get("type") == "RolledBack" for c in conds["conditions"]):
        conds["conditions"] = conditions(
            conds, "RolledBack", False, "SpecEdited", "the spec was edited since the rollback"
        )
    blocked = memory.blocked
    if obs.driver is not None and (blocked is None or blocked.condition == DRIVER):
        # A driver pod exists: creating one works (again).
        if any(c.get("type") == DRIVER for c in conds["conditions"]):
            conds["conditions"] = conditions(
                conds, DRIVER, True, "Created", f"driver pod {obs.driver.name} exists"
            )
    elif blocked is not None:
        conds["conditions"] = conditions(
            conds, blocked.condition, False, blocked.reason, blocked.message
        )
    status["conditions"] = conds["conditions"]
    return status
