"""Deletion of a pipeline: fence above every epoch, resolve what is in doubt, and always let go.

A finalizer that never finishes blocks ``kubectl delete`` and the deletion of the whole
namespace, so the sink clean-up is bounded:

- it runs with an epoch *reserved on the object* (guarded by resourceVersion, like every other
  reservation) above the annotation, ``status.epoch`` and the sink fence, so no driver launched
  by an in-flight reconcile shares it and a fence left ahead (a manual ``eo recover --epoch N``)
  cannot refuse it;
- when the sink cannot be reached (down, a wrong DSN, a refused login) the finalizer retries
  until ``timeout`` seconds after the deletion started, then lets go with a Warning event that
  names the ``eo recover`` command still to run;
- the annotation ``eo.dev/skip-sink-cleanup: "true"`` lets go at once, and so do credentials
  that are gone (the Secret deleted first, as in a namespace deletion): waiting cannot bring
  them back;
- a fence another writer owns (this object waited for a hand-over, or handed it over) is left
  alone: that writer's drivers run. A fence this object owns is released once resolved, so the
  pipeline's object elsewhere, or one re-created here, takes it above its epoch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from eo_jobs.protocol.control import ForeignFenceOwnerError
from eo_jobs.protocol.errors import FenceRegressionError
from eo_jobs.sinks.postgres.credentials import env_var_for
from eo_jobs.spec.models import EPOCH_ANNOTATION, Pipeline
from eo_operator.blockers import classify, safe_message
from eo_operator.fence_owner import fence_owner
from eo_operator.kube import Conflict, Kube
from eo_operator.sinks import PipelineSinks, dsns_from_secrets

log = logging.getLogger("eo.operator")

SKIP_ANNOTATION = "eo.dev/skip-sink-cleanup"
"""Set to ``"true"`` to delete without touching the sink (it is unreachable for good)."""
FENCE_ATTEMPTS = 3
"""Fence raises per pass: a fence that keeps moving ahead is someone else's loop, not ours."""


class CleanupPending(Exception):  # noqa: N818 (a signal to retry, not an error)
    """The sink clean-up failed and the wait is not over: try again after ``delay`` seconds."""

    def __init__(self, message: str, delay: float) -> None:
        super().__init__(message)
        self.delay = delay


def _int(value: Any) -> int:
    return int(value) if str(value).isdigit() else 0


def _epoch_above(obj: dict[str, Any]) -> int:
    annotations = obj["metadata"].get("annotations") or {}
    status = obj.get("status") or {}
    return max(_int(annotations.get(EPOCH_ANNOTATION)), _int(status.get("epoch"))) + 1


def _deletion_started(obj: dict[str, Any], now: datetime) -> datetime:
    raw = obj["metadata"].get("deletionTimestamp")
    return datetime.fromisoformat(str(raw).replace("Z", "+00:00")) if raw else now


def _reason(exc: BaseException) -> str:
    """One line about a failure, never a credential (a DSN that does not parse is quoted by
    libpq, password included)."""
    blocker = classify(exc, "")
    if blocker is not None and blocker.reason == "DsnInvalid":
        return "the DSN in the Secret is not a valid connection string"
    return f"{type(exc).__name__}: {safe_message(exc)}"[:300]


LetGo = Callable[[str], None]
"""Told the message when a deletion lets go without its sink clean-up (the operator counts it
and records it where it outlives the namespace)."""


def _let_go(
    kube: Kube, obj: dict[str, Any], pipeline: Pipeline, epoch: int, why: str, on_let_go: LetGo
) -> str:
    variables = ", ".join(env_var_for(s.name) for s in pipeline.spec.sinks)
    message = (
        f"{pipeline.key} deleted without sink clean-up: {why}. Its prepared transactions may "
        f"stay in doubt (holding locks): run `eo recover <pipeline manifest> --epoch {epoch}` "
        f"with {variables} set to the sinks' DSNs"
    )
    kube.event(obj, "FinalizedWithoutSink", message, warning=True)
    log.warning("%s", message)
    on_let_go(message)
    return message


def clean_up_sinks(
    kube: Kube,
    namespace: str,
    name: str,
    pipeline: Pipeline,
    timeout: float,
    now: datetime,
    on_let_go: LetGo = lambda _message: None,
) -> str:
    """Fence and resolve for a deleted pipeline whose drivers are stopped; returns a summary.

    Raises ``CleanupPending`` while the sink fails and ``timeout`` has not passed since the
    deletion started; afterwards it lets go with a Warning event, and ``on_let_go``.
    """
    obj = kube.get_pipeline(namespace, name)
    if obj is None:
        return "already gone"
    epoch = _epoch_above(obj)
    annotations = obj["metadata"].get("annotations") or {}
    if annotations.get(SKIP_ANNOTATION, "").lower() == "true":
        return _let_go(
            kube, obj, pipeline, epoch, f"annotation {SKIP_ANNOTATION} is set", on_let_go
        )
    try:
        # Remembered: a namespace deletion removes the Secrets before this runs (N5).
        dsns = dsns_from_secrets(kube, pipeline, remembered=True)
        sinks = PipelineSinks(pipeline, dsns, kube, remembered=True)
    except (KeyError, ApiException) as exc:
        why = f"sink credentials unavailable ({_reason(exc)})"
        return _let_go(kube, obj, pipeline, epoch, why, on_let_go)
    try:
        return _fence_and_resolve(kube, obj, sinks, epoch)
    except Conflict:
        raise CleanupPending(f"{pipeline.key} changed while reserving its epoch", 1.0) from None
    except Exception as exc:  # the sink is down, the DSN wrong, the login refused, ...
        waited = (now - _deletion_started(obj, now)).total_seconds()
        if waited < timeout:
            left = timeout - waited
            raise CleanupPending(
                f"sink clean-up of {pipeline.key} failed ({_reason(exc)}); retrying for up to "
                f"{left:.0f}s more",
                min(10.0, max(1.0, left)),
            ) from exc
        why = f"the sink clean-up failed for {timeout:.0f}s ({_reason(exc)})"
        return _let_go(kube, obj, pipeline, epoch, why, on_let_go)
    finally:
        sinks.close()


def _fence_and_resolve(kube: Kube, obj: dict[str, Any], sinks: PipelineSinks, epoch: int) -> str:
    control = sinks.bound.control
    control.ensure_schema()
    key = sinks.bound.pipeline
    owner = fence_owner(obj)
    for _ in range(FENCE_ATTEMPTS):
        fence = control.fence(key)
        if fence is not None and fence.owner not in (None, owner):
            return _not_ours(kube, obj, key, fence.owner)
        epoch = max(epoch, (0 if fence is None else fence.epoch) + 1)
        obj = kube.reserve_epoch(obj, epoch)
        try:
            report = sinks.recover(epoch, owner)
        except ForeignFenceOwnerError as exc:  # handed over since it was read
            return _not_ours(kube, obj, key, exc.owner)
        except FenceRegressionError as exc:
            epoch = exc.current + 1
            continue
        # Let go: an object re-created under this name (a new UID), or the pipeline's object
        # in another cluster, takes the fence above this epoch without a hand-over.
        control.release_fence(key, owner)
        # Nor does its audit position hold markers back any more (protocol/retention.py).
        control.forget_audited(key)
        summary = (
            f"driver stopped; fenced to {epoch}; {len(report.committed)} committed, "
            f"{len(report.rolled_back)} rolled back, {report.left} left; fence released"
        )
        kube.event(obj, "Finalized", summary)
        return summary
    raise RuntimeError(f"the fence of {sinks.bound.pipeline} kept moving above epoch {epoch}")


def _not_ours(kube: Kube, obj: dict[str, Any], key: str, owner: str) -> str:
    """Another writer owns the fence (this object waited for it, or handed it over): its
    drivers run, so this deletion neither fences nor resolves anything."""
    summary = (
        f"the sink fence of {key} is owned by {owner}, another writer of this pipeline: "
        "deleted without fencing or resolving (that writer's drivers run on)"
    )
    kube.event(obj, "Finalized", summary)
    return summary
