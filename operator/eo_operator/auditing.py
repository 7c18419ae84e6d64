"""The continuous audit of one pipeline: a bounded pass on its interval, shown where people look.

The reconciler's health pass (already on an executor thread, never on kopf's event loop, and
with the sink DSNs it read from the Secrets for the sweep) hands each pipeline here. When the
pipeline's interval (``spec.audit.intervalSeconds``, else the chart's
``operator.auditIntervalSeconds``) has passed since ``status.audit.lastPassTime``, one pass of
``eo_jobs.audit`` runs from the position saved in status, bounded by
``spec.audit.maxBatchesPerPass``. Its result becomes:

* ``status.audit`` (position, last audited batch, pass time, checks run and not run, the latched
  violation) and the ``Audited`` condition: False names the first failing batch and check, True
  how many batches were audited and which checks ran;
* an Event on each change of the condition (Warning on a violation, Normal on recovery);
* the ``eo_audit_*`` metrics;
* the position in the control database (``eo.audited``), so the driver's marker pruning keeps
  what the audit has not read yet (``eo_jobs.protocol.retention``).

A query a recorded start-over forgot (``spec.lifecycle.startOver``) leaves the position, and
what the pass finds of it (its decisions gone, its markers orphaned) is no violation: it was
deleted on purpose, in the transaction that recorded the start-over.

A pass reports a violation once and moves on; the condition latches it until a person
acknowledges it with the annotation ``eo.dev/audit-acknowledged`` set to a time after the
violation was found. Status is written before the control database, so a pass whose status write
is refused (the object changed) is simply done again, and pruning never runs ahead of a
position the status does not hold.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from eo_jobs.audit import AuditResult, Position, Status, audit
from eo_jobs.audit.targets import target_for
from eo_jobs.protocol.control_api import ControlDatabase
from eo_jobs.protocol.gid import query_token
from eo_jobs.spec.models import Pipeline
from eo_operator.audit_metrics import AuditMetrics
from eo_operator.kube import Kube
from eo_operator.status import conditions, parse_time

log = logging.getLogger("eo.operator")

AUDITED = "Audited"
"""The condition type."""
ACK_ANNOTATION = "eo.dev/audit-acknowledged"
"""An RFC 3339 time: a latched violation found before it is cleared."""


class ContinuousAudit:
    """Runs each pipeline's audit passes and publishes their results."""

    def __init__(
        self,
        kube: Kube,
        metrics: AuditMetrics,
        default_interval: float,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.kube = kube
        self.metrics = metrics
        self.default_interval = default_interval
        self.clock = clock

    def run(
        self,
        obj: dict[str, Any],
        pipeline: Pipeline,
        dsns: Mapping[str, str],
        control: ControlDatabase,
    ) -> None:
        """One pass of ``pipeline`` if its interval has passed; nothing otherwise."""
        settings = pipeline.spec.audit
        status = obj.get("status") or {}
        if not settings.enabled:
            self._switch_off(obj, pipeline, control)
            return
        saved = status.get("audit") or {}
        now = self.clock()
        last = parse_time(saved.get("lastPassTime"))
        interval = settings.interval_seconds or self.default_interval
        if last is not None and (now - last).total_seconds() < interval:
            return
        target = target_for(
            pipeline,
            dsns,
            control.dsn,
            append_only=settings.append_only,
            batch_columns=settings.batch_columns,
        )
        lifecycle = pipeline.spec.lifecycle is not None or bool(status.get("lifecycle"))
        forgotten = _forgotten(control, pipeline.key) if lifecycle else frozenset()
        start = _position(saved.get("position"))
        start = replace(
            start, batches={t: b for t, b in start.batches.items() if t not in forgotten}
        )
        result = audit(target, start, max_batches=settings.max_batches_per_pass)
        if lifecycle and result.violations:
            # Read after the pass: a start-over that forgot a query while it ran is seen (its
            # record commits with the delete of the decisions).
            forgotten = _forgotten(control, pipeline.key)
            kept = tuple(v for v in result.violations if v.query not in forgotten)
            result = replace(result, violations=kept)
        self._publish(obj, pipeline, saved, result, now, interval)
        if result.end.batches:
            control.record_audited(pipeline.key, result.end.batches)

    def _publish(
        self,
        obj: dict[str, Any],
        pipeline: Pipeline,
        saved: Mapping[str, Any],
        result: AuditResult,
        now: datetime,
        interval: float,
    ) -> None:
        namespace, name = pipeline.metadata.namespace, pipeline.metadata.name
        last_batch = max(result.end.batches.values(), default=None)
        total = int(saved.get("batchesAudited") or 0) + result.batches
        violation = _latched(saved.get("violation"), obj, result, now)
        ran = sorted({f"{c.check} [{c.subject}]" for c in result.checks if c.status is Status.RAN})
        not_run = [f"{c.check} [{c.subject}]: {c.status}: {c.detail}" for c in result.not_run()]
        lag = max(result.lag().values(), default=0)
        kept = saved.get("position") or {}
        sums = kept.get("tableSums") or {}
        audit_status = {
            "position": {
                "batches": _replacing(kept.get("batches"), result.end.batches),
                "tableRows": _replacing(kept.get("tableRows"), result.end.table_rows),
                "tableSums": _replacing(
                    sums,
                    {k: _replacing(sums.get(k), v) for k, v in result.end.table_sums.items()},
                ),
            },
            "lastAuditedBatch": last_batch,
            "lastPassTime": now.isoformat(),
            "batchesAudited": total,
            "batchesLastPass": result.batches,
            "lagBatches": lag,
            "checksRun": ran,
            "notRun": not_run,
            "violation": violation,
        }
        current = obj.get("status") or {}
        before = next(
            (c.get("status") for c in current.get("conditions") or [] if c.get("type") == AUDITED),
            None,
        )
        if violation is not None:
            ok, reason, message = False, "Violation", _violation_message(violation, namespace, name)
        else:
            ok, reason = True, "NoViolation"
            message = _clean_message(total, last_batch, result, ran, not_run)
        conds = conditions(current, AUDITED, ok, reason, message)
        self.kube.patch_status(obj, {"audit": audit_status, "conditions": conds})
        self.metrics.observe(
            namespace,
            name,
            result,
            last_batch,
            now.timestamp(),
            interval,
            None if violation is None else str(violation["check"]),
        )
        now_value = "True" if ok else "False"
        if before != now_value and not ok:
            self.kube.event(obj, "AuditViolation", message, warning=True)
            log.warning("%s: audit: %s", pipeline.key, message)
        elif before == "False" and ok:
            self.kube.event(obj, "AuditRecovered", message)
            log.info("%s: audit: %s", pipeline.key, message)

    def _switch_off(
        self, obj: dict[str, Any], pipeline: Pipeline, control: ControlDatabase
    ) -> None:
        """The audit was switched off: forget its position, condition and series (once)."""
        status = obj.get("status") or {}
        kept = [c for c in status.get("conditions") or [] if c.get("type") != AUDITED]
        if status.get("audit") is None and len(kept) == len(status.get("conditions") or []):
            return
        control.forget_audited(pipeline.key)
        self.kube.patch_status(obj, {"audit": None, "conditions": kept})
        self.metrics.forget(pipeline.metadata.namespace, pipeline.metadata.name)


def _forgotten(control: ControlDatabase, pipeline: str) -> frozenset[str]:
    """Query ids, and their gid tokens, that a recorded start-over forgot on purpose
    (``spec.lifecycle.startOver``): their decisions are gone and their markers orphaned by
    design, which the audit would otherwise report as violations of the decision log and
    orphan markers."""
    ids = {
        str(query)
        for record in control.lifecycle_records(pipeline)
        if record.kind == "start-over"
        for query in record.detail.get("forgottenQueries") or []
    }
    return frozenset(ids | {query_token(query) for query in ids})


def _replacing(kept: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any]:
    """``new`` as a merge patch over ``kept``: status is merge-patched, so a key of the old
    position that the new one lacks must be sent as null, or it stays (a dropped sum baseline
    would come back as a stale one when its sumColumns are declared again)."""
    return {**{k: None for k in kept or {} if k not in new}, **new}


def _position(saved: Mapping[str, Any] | None) -> Position:
    """The position kept in status (camelCase) as the auditor's."""
    saved = saved or {}
    return Position.from_json(
        {
            "batches": saved.get("batches") or {},
            "table_rows": saved.get("tableRows") or {},
            "table_sums": saved.get("tableSums") or {},
        }
    )


def _latched(
    kept: Mapping[str, Any] | None, obj: dict[str, Any], result: AuditResult, now: datetime
) -> dict[str, Any] | None:
    """The violation to show: the kept one unless acknowledged since, else this pass's first."""
    acknowledged = parse_time((obj["metadata"].get("annotations") or {}).get(ACK_ANNOTATION))
    if kept and not (
        acknowledged is not None
        and acknowledged >= (parse_time(kept.get("detectedAt")) or acknowledged)
    ):
        return dict(kept)
    first = result.first_violation()
    if first is None:
        return None
    return {
        "check": str(first.check),
        "batch": first.batch,
        "query": first.query,
        "evidence": first.evidence[:1000],
        "detectedAt": now.isoformat(),
    }


def _violation_message(violation: Mapping[str, Any], namespace: str, name: str) -> str:
    batch = "" if violation.get("batch") is None else f"batch {violation['batch']}: "
    return (
        f"{batch}{violation['check']} failed: {violation.get('evidence', '')} (found "
        f"{violation['detectedAt']}). Once investigated (docs/runbook.md#eoauditviolation): "
        f"kubectl annotate eop {name} -n {namespace} {ACK_ANNOTATION}=$(date -u +%FT%TZ) "
        "--overwrite"
    )


def _clean_message(
    total: int, last_batch: int | None, result: AuditResult, ran: list[str], not_run: list[str]
) -> str:
    upto = "" if last_batch is None else f" up to batch {last_batch}"
    checks = ", ".join(sorted({r.split(" [")[0] for r in ran})) or "none"
    skipped = "; not run: " + "; ".join(not_run) if not_run else ""
    return (
        f"no violation: {total} batches audited{upto} ({result.batches} in the last pass); "
        f"ran: {checks}{skipped}"
    )
