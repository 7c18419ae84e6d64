"""The ``eo_audit_*`` metrics: what the operator's continuous audit checked and found.

Labelled like every ``eo_pipeline_*`` series (``namespace``, ``pipeline``) and registered on the
operator's registry by ``PipelineMetrics``, which drops them with the pipeline's other series
when it is deleted. The violation counter is created at 0 for every check on a pipeline's first
pass, so ``increase()`` sees the first violation instead of a new series.
"""

from __future__ import annotations

import threading
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from eo_jobs.audit import AuditResult, Check

_PIPELINE: Final = ("namespace", "pipeline")
PASS_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""An idle pass costs ~0.1 s, 1,000 batches ~0.5 s; the default bound (5,000) a few seconds."""


class AuditMetrics:
    """The audit's series of every pipeline."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._lock = threading.Lock()
        self._seen: set[tuple[str, str]] = set()

        def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> Gauge:
            return Gauge(name, doc, (*_PIPELINE, *extra), registry=registry)

        self._batches = Counter(
            "eo_audit_batches", "Decided batches the audit looked at.", _PIPELINE, registry=registry
        )
        self._violations = Counter(
            "eo_audit_violations",
            "Violations of exactly-once the audit found, by check.",
            (*_PIPELINE, "check"),
            registry=registry,
        )
        self._cpu = Counter(
            "eo_audit_cpu_seconds",
            "CPU time the operator spent in audit passes (the auditing thread's own; the "
            "databases' is theirs): its rate is the audit's share of the operator's CPU.",
            _PIPELINE,
            registry=registry,
        )
        self._duration = Histogram(
            "eo_audit_pass_duration_seconds",
            "Duration of one audit pass.",
            _PIPELINE,
            buckets=PASS_BUCKETS,
            registry=registry,
        )
        self._last_batch = gauge(
            "eo_audit_last_batch",
            "Highest batch every audit check is final for (over the pipeline's queries).",
        )
        self._lag = gauge(
            "eo_audit_lag_batches",
            "Decided batches beyond the audit's position (the most of any query).",
        )
        self._last_pass = gauge(
            "eo_audit_last_pass_timestamp_seconds",
            "Unix time of the last audit pass that read the databases.",
        )
        self._interval = gauge(
            "eo_audit_interval_seconds",
            "Seconds between two audit passes of the pipeline (what EoAuditStale measures by).",
        )
        self._latched = gauge(
            "eo_audit_violation_latched",
            "1 while a violation of this check is shown and not acknowledged (status.audit).",
            ("check",),
        )
        self._all = (
            self._interval,
            self._latched,
            self._batches,
            self._cpu,
            self._last_batch,
            self._violations,
            self._lag,
            self._last_pass,
            self._duration,
        )

    def observe(
        self,
        namespace: str,
        pipeline: str,
        result: AuditResult,
        last_batch: int | None,
        at: float,
        interval: float,
        latched: str | None,
    ) -> None:
        """Publish one pass: batches, position, violations by check, lag, time and duration;
        the pipeline's interval, and the check of the violation shown, if any (``latched``)."""
        key = (namespace, pipeline)
        with self._lock:
            if key not in self._seen:
                for check in Check:
                    self._violations.labels(namespace, pipeline, str(check))
                self._seen.add(key)
            self._batches.labels(*key).inc(result.batches)
            self._cpu.labels(*key).inc(result.cpu_seconds)
            for violation in result.violations:
                self._violations.labels(namespace, pipeline, str(violation.check)).inc()
            if last_batch is not None:  # None: no batch audited yet, so no series
                self._last_batch.labels(*key).set(last_batch)
            self._lag.labels(*key).set(max(result.lag().values(), default=0))
            self._last_pass.labels(*key).set(at)
            self._duration.labels(*key).observe(result.seconds)
            self._interval.labels(*key).set(interval)
            for check in Check:
                self._latched.labels(namespace, pipeline, str(check)).set(str(check) == latched)

    def forget(self, namespace: str, pipeline: str) -> None:
        """Drop the pipeline's series (deleted, or its audit switched off)."""
        with self._lock:
            self._seen.discard((namespace, pipeline))
            for metric in self._all:
                metric.remove_by_labels({"namespace": namespace, "pipeline": pipeline})
