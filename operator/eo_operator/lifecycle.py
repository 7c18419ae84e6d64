"""What the operator shows of ``spec.lifecycle``: status, the Lifecycle condition, events.

The driver does the actions (``eo_jobs.runtime.lifecycle``: only it reaches the checkpoint)
and records each in the control database; the operator reads those records on its health pass
and shows them. A nonce change is a spec change like any (the spec hash covers
``spec.lifecycle``), so the operator's part in the action itself is what it does for every
restart: stop the driver at a batch boundary, raise the fence, resolve what is in doubt,
launch the next driver.

Pure: records and the current status in, status fields, condition and events out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

from eo_jobs.protocol.control_api import LifecycleRecord
from eo_jobs.spec.models import PipelineSpec

CONDITION = "Lifecycle"
SNAPSHOT = "snapshot"
START_OVER = "start-over"
POSITION = ("queryId", "lastDecidedBatch", "lastDecidedEpoch", "lastCommittedBatch")


@dataclass(frozen=True)
class View:
    """``status.lifecycle``, the Lifecycle condition (ok, reason, message) and new events."""

    status: dict[str, Any] | None
    condition: tuple[bool, str, str] | None
    events: list[tuple[str, str]] = field(default_factory=list)


def _time(record: LifecycleRecord) -> str | None:
    return None if record.taken_at is None else record.taken_at.astimezone(UTC).isoformat()


def _snapshot(record: LifecycleRecord) -> dict[str, Any]:
    shown = {
        "name": record.name,
        "kind": record.kind,
        "nonce": record.nonce,
        "takenAt": _time(record),
        "epoch": record.epoch,
        **{key: record.detail.get(key) for key in POSITION},
    }
    return {key: value for key, value in shown.items() if value is not None}


def _start_over(record: LifecycleRecord) -> dict[str, Any]:
    shown = {
        "nonce": record.nonce,
        "time": _time(record),
        "epoch": record.epoch,
        "forgottenQueries": list(record.detail.get("forgottenQueries") or []),
        "forgottenDecisions": int(record.detail.get("forgottenDecisions") or 0),
        "snapshot": record.name if record.pruned_at is None else None,
    }
    return {key: value for key, value in shown.items() if value is not None}


def _said(record: LifecycleRecord) -> str:
    """One record for people."""
    where = record.detail
    if record.kind == SNAPSHOT:
        query = where.get("queryId")
        if query is None:
            return f"snapshot {record.nonce} taken of an empty checkpoint"
        return (
            f"snapshot {record.nonce} taken in eo-snapshots/{record.name}: query {query}, last "
            f"decided batch {where.get('lastDecidedBatch')} (epoch "
            f"{where.get('lastDecidedEpoch')}), Spark's last commit "
            f"{where.get('lastCommittedBatch')}"
        )
    forgotten = list(where.get("forgottenQueries") or [])
    return (
        f"started over (nonce {record.nonce}) with epoch {record.epoch}: the old checkpoint is in "
        f"eo-snapshots/{record.name}, {int(where.get('forgottenDecisions') or 0)} decisions of "
        f"{len(forgotten)} earlier quer{'y' if len(forgotten) == 1 else 'ies'} deleted "
        f"({', '.join(forgotten) or 'none'}); rows already written stay in the sinks"
    )


def view(
    spec: PipelineSpec,
    records: Sequence[LifecycleRecord],
    current: dict[str, Any],
    refused: str | None = None,
) -> View:
    """What to show, from the control database's ``records`` and the object's ``current``
    status; ``refused`` is the message of a driver that refused a start-over (exit 79)."""
    lifecycle = spec.lifecycle
    if lifecycle is None and not records:
        return View(None, None)
    kept = [r for r in records if r.pruned_at is None]
    starts = [r for r in records if r.kind == START_OVER]
    status: dict[str, Any] = {
        "snapshots": [_snapshot(r) for r in kept],
        "startOver": _start_over(starts[-1]) if starts else None,
    }
    shown = current.get("lifecycle") or {}
    seen = {s.get("name") for s in shown.get("snapshots") or []}
    seen_start = (shown.get("startOver") or {}).get("nonce")
    events = [
        ("SnapshotTaken", _said(r)) for r in kept if r.kind == SNAPSHOT and r.name not in seen
    ]
    if starts and starts[-1].nonce != seen_start:
        events.append(("StartedOver", _said(starts[-1])))
    done = {(r.kind, r.nonce): r for r in records}
    asked = []
    if lifecycle is not None and lifecycle.snapshot is not None:
        asked.append((SNAPSHOT, lifecycle.snapshot.nonce))
    if lifecycle is not None and lifecycle.start_over is not None:
        asked.append((START_OVER, lifecycle.start_over.nonce))
    pending = [(kind, nonce) for kind, nonce in asked if (kind, nonce) not in done]
    if refused is not None:
        condition = (False, "StartOverRefused", refused)
    elif pending:
        kind, nonce = pending[0]
        reason = "SnapshotPending" if kind == SNAPSHOT else "StartOverPending"
        condition = (
            False,
            reason,
            f"{kind} {nonce} asked for: the driver is restarted at a batch boundary (fence "
            "raised, in-doubt transactions resolved) and does it before its query starts",
        )
    elif asked:
        condition = (True, "Done", "; ".join(_said(done[key]) for key in asked))
    else:
        condition = None
    return View(status, condition, events)
