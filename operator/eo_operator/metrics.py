"""Prometheus metrics of the operator: the health of every pipeline, even while its driver is dead.

A dead driver exports nothing, so alerts that must fire exactly then (no recent commit, stale
in-doubt transactions, a crash loop) are computed from what the operator observes: the status it
records, the sink state it reads and the driver's heartbeat. Every reconcile pass hands a
:class:`PipelinePass` to :meth:`PipelineMetrics.observe_pass` (phase, restarts, driver up: these
must not freeze while a sink is unreachable or the spec is invalid); the periodic health read
hands a :class:`PipelineHealth` to :meth:`PipelineMetrics.observe_health`. This module owns every
metric name, label and bucket, so the alert rules, the dashboard and ``docs/metrics.md`` have
one source.

Metrics live on a dedicated registry (never the process-global one) so tests and several
operator instances in one process cannot collide.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Final, Literal, get_args
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
)
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from eo_operator.audit_metrics import AuditMetrics

Phase = Literal[
    "Pending",
    "Starting",
    "Running",
    "Recovering",
    "Backoff",
    "Suspended",
    "Stopping",
    "Failed",
    "Waiting",
]
PHASES: Final[tuple[Phase, ...]] = get_args(Phase)
"""Every phase gets a series (one-hot), so a phase change never leaves a stale 1 behind."""

Handler = Literal["reconcile", "timer", "delete", "recover", "sweep"]
HANDLERS: Final[tuple[Handler, ...]] = get_args(Handler)
"""The operator's handler kinds: a fixed set keeps the handler label bounded."""

OUTCOMES: Final = ("committed", "rolled_back")

DEFAULT_MAX_CHECKPOINT_DURATION_SECONDS: Final = 300.0
DEFAULT_MAX_FAILURE_RATE_RATIO: Final = 0.05

CHECKPOINT_BUCKETS: Final = (
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0,
)  # fmt: skip
"""0.1 s .. 30 min: a batch includes writing its rows, so minutes are normal for big batches."""
COMMIT_BUCKETS: Final = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
)  # fmt: skip
"""Phase 2 only (COMMIT PREPARED): milliseconds when healthy, seconds under lock contention."""
RECOVERY_BUCKETS: Final = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
RECONCILE_BUCKETS: Final = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

_PIPELINE: Final = ("namespace", "pipeline")


@dataclass(frozen=True)
class SinkHealth:
    """Prepared transactions in one sink's database, and the server's ceiling for them."""

    prepared: int
    """Every prepared transaction in the database, not only this pipeline's: all share the cap."""
    max_prepared: int
    """The server's max_prepared_transactions setting."""
    database: str = ""
    """The server, ``host:port`` (never credentials): the ``database`` label that lets
    EoPreparedTransactionsNearLimit page once per server, not once per pipeline."""


@dataclass(frozen=True)
class PipelinePass:
    """What every reconcile pass knows, whether or not the sink answers or the spec parses."""

    phase: Phase
    driver_up: bool
    restarts: int
    epoch: int
    active_since: float | None = None
    """Unix time of the latest driver launch, or of the pipeline's creation before any: the
    no-progress clock starts there, so a pipeline that never ran a trigger is still covered."""

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"phase {self.phase!r} is not one of {', '.join(PHASES)}")
        if self.restarts < 0:
            raise ValueError(f"restarts must be >= 0, got {self.restarts}")


@dataclass(frozen=True)
class PipelineHealth:
    """One observation of a pipeline, as the operator sees it from status and the sink.

    Totals (``restarts``, ``batches``, ``failures``) are the cumulative values recorded in status;
    the metrics turn them into monotonic counters. Durations are only those observed since the
    previous call, so that each batch lands in the histograms once.
    """

    guarantee: str
    epoch: int
    phase: Phase
    driver_up: bool
    restarts: int
    batches: int
    failures: int
    failure_rate: float
    trigger_interval_seconds: float
    last_batch_id: int | None = None
    last_commit_time: float | None = None
    """Unix time of the last decided batch; None until the first decision."""
    checkpoint_durations: tuple[float, ...] = ()
    commit_durations: tuple[float, ...] = ()
    max_checkpoint_duration_seconds: float = DEFAULT_MAX_CHECKPOINT_DURATION_SECONDS
    max_failure_rate_ratio: float = DEFAULT_MAX_FAILURE_RATE_RATIO
    no_commit_floor_seconds: float = 300.0
    in_doubt: int = 0
    in_doubt_oldest_age_seconds: float = 0.0
    sinks: Mapping[str, SinkHealth] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"phase {self.phase!r} is not one of {', '.join(PHASES)}")
        for name in ("restarts", "batches", "failures", "in_doubt"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("failure_rate", "max_failure_rate_ratio"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} is a ratio in [0, 1], got {value}")


@dataclass
class _Seen:
    """What the previous observation of one pipeline exported, to compute deltas and removals."""

    guarantee: str | None
    restarts: int = 0
    batches: int = 0
    failures: int = 0
    sinks: frozenset[tuple[str, str]] = frozenset()
    """(sink, database) pairs exported, so a removed sink or a moved DSN loses its series."""
    counted_drivers: dict[str, str] = field(default_factory=dict)
    """Per once-per-pod counter, the last driver pod it counted."""


class _SecondsSince:
    """A gauge of "seconds since the latest of some timestamps", computed at scrape time.

    A value frozen at the operator's last observation would stop growing exactly when the
    operator is slow or stuck; computing it per scrape keeps the no-commit alert honest. Each
    pipeline may have several named timestamps (a commit, a trigger, a launch); the newest wins.
    """

    def __init__(self, name: str, documentation: str, clock: Callable[[], float]) -> None:
        self.name: Final = name
        self.documentation: Final = documentation
        self._clock = clock
        self._times: dict[tuple[str, str], dict[str, float]] = {}
        self._lock = threading.Lock()

    def set(self, namespace: str, pipeline: str, source: str, when: float | None) -> None:
        with self._lock:
            times = self._times.setdefault((namespace, pipeline), {})
            if when is None:
                times.pop(source, None)
            else:
                times[source] = when
            if not times:
                del self._times[(namespace, pipeline)]

    def forget(self, namespace: str, pipeline: str) -> None:
        with self._lock:
            self._times.pop((namespace, pipeline), None)

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(self.name, self.documentation, labels=_PIPELINE)]

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=_PIPELINE)
        now = self._clock()
        with self._lock:
            for (namespace, pipeline), times in sorted(self._times.items()):
                family.add_metric([namespace, pipeline], max(0.0, now - max(times.values())))
        return [family]


class PipelineMetrics:
    """Every operator metric, on one registry, behind a typed API the handlers call."""

    def __init__(self, registry: CollectorRegistry, clock: Callable[[], float] = time.time) -> None:
        self.registry = registry
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], _Seen] = {}

        def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> Gauge:
            return Gauge(name, doc, _PIPELINE + extra, registry=registry)

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, _PIPELINE + extra, registry=registry)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, _PIPELINE, buckets=buckets, registry=registry)

        self._info = gauge("eo_pipeline_info", "Always 1; carries the guarantee.", ("guarantee",))
        self._epoch = gauge("eo_pipeline_epoch", "Fencing epoch of the current driver.")
        self._restarts = counter("eo_pipeline_restarts", "Driver relaunches after failures.")
        self._phase = gauge("eo_pipeline_phase", "1 for the current phase, else 0.", ("phase",))
        self._driver_up = gauge("eo_pipeline_driver_up", "1 when the driver pod is Running.")
        self._last_batch_id = gauge("eo_pipeline_last_batch_id", "Last decided micro-batch id.")
        self._last_commit_timestamp = gauge(
            "eo_pipeline_last_commit_timestamp_seconds", "Unix time of the last decided batch."
        )
        self._checkpoint_duration = histogram(
            "eo_pipeline_checkpoint_duration_seconds",
            "Whole batch duration: prepare + decide + commit.",
            CHECKPOINT_BUCKETS,
        )
        self._commit_duration = histogram(
            "eo_pipeline_commit_duration_seconds",
            "Phase 2 duration (COMMIT PREPARED of every participant).",
            COMMIT_BUCKETS,
        )
        self._batches = counter("eo_pipeline_batches", "Batches decided.")
        self._batch_failures = counter("eo_pipeline_batch_failures", "Failed batch attempts.")
        self._failure_rate = gauge(
            "eo_pipeline_failure_rate_ratio", "Failed attempts / all attempts (status window)."
        )
        self._trigger_interval = gauge(
            "eo_pipeline_trigger_interval_seconds", "spec.checkpoint.triggerIntervalSeconds."
        )
        self._alert_max_checkpoint_duration = gauge(
            "eo_pipeline_alert_max_checkpoint_duration_seconds",
            "spec.alerts.maxCheckpointDurationSeconds: alert threshold for batch duration.",
        )
        self._alert_no_commit_floor = gauge(
            "eo_pipeline_alert_no_commit_floor_seconds",
            "spec.alerts.noCommitFloorSeconds: the no-commit alert waits at least this long.",
        )
        self._alert_max_failure_rate = gauge(
            "eo_pipeline_alert_max_failure_rate_ratio",
            "spec.alerts.maxFailureRatePercent / 100: alert threshold for the failure rate.",
        )
        self._in_doubt = gauge(
            "eo_pipeline_in_doubt_transactions", "Prepared transactions of this pipeline."
        )
        self._in_doubt_oldest_age = gauge(
            "eo_pipeline_in_doubt_oldest_age_seconds", "Age of the oldest in-doubt transaction."
        )
        self._in_doubt_resolutions = counter(
            "eo_pipeline_in_doubt_resolutions",
            "In-doubt transactions resolved by recovery or the sweep.",
            ("outcome",),
        )
        self._fenced_attempts = counter(
            "eo_pipeline_fenced_attempts", "Drivers that found themselves fenced (zombies)."
        )
        self._start_timeouts = counter(
            "eo_pipeline_start_timeouts",
            "Driver pods still Pending after restartPolicy.startTimeoutSeconds (deleted, counted).",
        )
        self._hung_restarts = counter(
            "eo_pipeline_hung_restarts",
            "Running drivers restarted after no progress for restartPolicy.progressTimeoutSeconds.",
        )
        self._recoveries = counter("eo_pipeline_recoveries", "Recoveries run (fence + resolve).")
        self._recovery_duration = histogram(
            "eo_pipeline_recovery_duration_seconds", "Duration of one recovery.", RECOVERY_BUCKETS
        )
        self._last_trigger = gauge(
            "eo_pipeline_last_trigger_timestamp_seconds",
            "Unix time of the driver's last trigger (heartbeat read from the driver).",
        )
        self._offsets_behind = gauge(
            "eo_pipeline_source_offsets_behind_latest",
            "Input waiting at the driver's last trigger (sources that report it, e.g. Kafka).",
        )
        self._sink_prepared = gauge(
            "eo_sink_prepared_transactions",
            "All prepared transactions in the sink's database server.",
            ("sink", "database"),
        )
        self._sink_max_prepared = gauge(
            "eo_sink_max_prepared_transactions",
            "The sink server's max_prepared_transactions.",
            ("sink", "database"),
        )
        self._reconcile_duration = Histogram(
            "eo_operator_reconcile_duration_seconds",
            "Duration of one handler run.",
            ("handler",),
            buckets=RECONCILE_BUCKETS,
            registry=registry,
        )
        self._reconcile_errors = Counter(
            "eo_operator_reconcile_errors",
            "Handler runs that raised.",
            ("handler",),
            registry=registry,
        )
        for handler in HANDLERS:
            self._reconcile_duration.labels(handler)
            self._reconcile_errors.labels(handler)
        self._leader = Gauge(
            "eo_operator_leader",
            "1 while this replica leads and reconciles, 0 while it waits as a standby (the "
            "no-leader alert counts the replicas at 1).",
            registry=registry,
        )
        self._finalized_without_sink = Counter(
            "eo_operator_finalized_without_sink",
            "Pipelines deleted without their sink clean-up (fence and resolve): their prepared "
            "transactions may be left in doubt. Kept after the pipeline is gone, on purpose.",
            ("namespace", "pipeline"),
            registry=registry,
        )
        self._api_requests = Counter(
            "eo_operator_api_requests",
            "HTTP requests the operator's passes and deletions sent to the Kubernetes API "
            "(kopf's own watches and patches not included).",
            ("method",),
            registry=registry,
        )
        self._last_observed = gauge(
            "eo_pipeline_last_observed_timestamp_seconds",
            "When a reconcile pass last observed the pipeline and its driver: status and the "
            "other per-pipeline series are at most this old.",
        )
        self._since_last_commit = _SecondsSince(
            "eo_pipeline_seconds_since_last_commit",
            "Seconds since the last decided batch, computed at scrape time.",
            clock,
        )
        self._since_last_progress = _SecondsSince(
            "eo_pipeline_seconds_since_last_progress",
            "Seconds since the last trigger, commit or launch (or creation), at scrape time.",
            clock,
        )
        registry.register(self._since_last_commit)
        registry.register(self._since_last_progress)
        self.audit = AuditMetrics(registry)
        """The continuous audit's series (``eo_audit_*``)."""
        self._per_pipeline: tuple[Gauge | Counter | Histogram, ...] = (
            self._info, self._epoch, self._restarts, self._phase, self._driver_up,
            self._last_batch_id, self._last_commit_timestamp, self._checkpoint_duration,
            self._commit_duration, self._batches, self._batch_failures, self._failure_rate,
            self._trigger_interval, self._alert_max_checkpoint_duration,
            self._alert_max_failure_rate, self._alert_no_commit_floor, self._in_doubt,
            self._in_doubt_oldest_age,
            self._in_doubt_resolutions, self._fenced_attempts, self._start_timeouts,
            self._hung_restarts, self._recoveries,
            self._recovery_duration, self._sink_prepared, self._sink_max_prepared,
            self._last_trigger, self._offsets_behind, self._last_observed,
        )  # fmt: skip

    def observe_pass(self, namespace: str, pipeline: str, observed: PipelinePass) -> None:
        """Publish what every reconcile pass knows: phase, driver, restarts, epoch.

        Called on every pass, before and independent of the sink: a pipeline that turned Failed
        (or has an invalid spec) while its database is unreachable must not keep exporting
        ``phase{Running}=1``, or the Failed alert could never fire.
        """
        key = (namespace, pipeline)
        with self._lock:
            seen = self._seen.get(key)
            if seen is None:
                seen = self._first_sight(namespace, pipeline, None)
            self._epoch.labels(*key).set(observed.epoch)
            for phase in PHASES:
                self._phase.labels(namespace, pipeline, phase).set(phase == observed.phase)
            self._driver_up.labels(*key).set(observed.driver_up)
            seen.restarts = _advance(self._restarts.labels(*key), seen.restarts, observed.restarts)
            self._since_last_progress.set(namespace, pipeline, "start", observed.active_since)
            self._last_observed.labels(*key).set(self._clock())

    def observe_driver_progress(
        self,
        namespace: str,
        pipeline: str,
        last_trigger_time: float | None,
        offsets_behind_latest: float | None,
    ) -> None:
        """Republish the driver's heartbeat and waiting input, so the alerts need one source.

        The operator's series outlive the driver: a heartbeat that stops arriving (driver hung,
        dead, or never started) keeps ageing in ``eo_pipeline_seconds_since_last_progress``.
        ``None`` means "not known": the last value read is kept.
        """
        key = (namespace, pipeline)
        with self._lock:
            if last_trigger_time is not None and last_trigger_time > 0:
                self._last_trigger.labels(*key).set(last_trigger_time)
                self._since_last_progress.set(namespace, pipeline, "trigger", last_trigger_time)
            if offsets_behind_latest is not None:
                self._offsets_behind.labels(*key).set(offsets_behind_latest)

    def observe_health(self, namespace: str, pipeline: str, health: PipelineHealth) -> None:
        """Publish one observation; counters advance by the growth of the status totals."""
        key = (namespace, pipeline)
        with self._lock:
            seen = self._seen.get(key)
            if seen is None:
                seen = self._first_sight(namespace, pipeline, health.guarantee)
            elif seen.guarantee != health.guarantee:
                if seen.guarantee is not None:
                    self._info.remove(namespace, pipeline, seen.guarantee)
                seen.guarantee = health.guarantee
            self._info.labels(namespace, pipeline, health.guarantee).set(1)
            self._epoch.labels(*key).set(health.epoch)
            for phase in PHASES:
                self._phase.labels(namespace, pipeline, phase).set(phase == health.phase)
            self._driver_up.labels(*key).set(health.driver_up)
            seen.restarts = _advance(self._restarts.labels(*key), seen.restarts, health.restarts)
            seen.batches = _advance(self._batches.labels(*key), seen.batches, health.batches)
            seen.failures = _advance(
                self._batch_failures.labels(*key), seen.failures, health.failures
            )
            self._set_optional(self._last_batch_id, key, health.last_batch_id)
            self._set_optional(self._last_commit_timestamp, key, health.last_commit_time)
            self._since_last_commit.set(namespace, pipeline, "commit", health.last_commit_time)
            self._since_last_progress.set(namespace, pipeline, "commit", health.last_commit_time)
            for seconds in health.checkpoint_durations:
                self._checkpoint_duration.labels(*key).observe(seconds)
            for seconds in health.commit_durations:
                self._commit_duration.labels(*key).observe(seconds)
            self._failure_rate.labels(*key).set(health.failure_rate)
            self._trigger_interval.labels(*key).set(health.trigger_interval_seconds)
            self._alert_max_checkpoint_duration.labels(*key).set(
                health.max_checkpoint_duration_seconds
            )
            self._alert_max_failure_rate.labels(*key).set(health.max_failure_rate_ratio)
            self._alert_no_commit_floor.labels(*key).set(health.no_commit_floor_seconds)
            self._in_doubt.labels(*key).set(health.in_doubt)
            self._in_doubt_oldest_age.labels(*key).set(
                health.in_doubt_oldest_age_seconds if health.in_doubt else 0.0
            )
            sinks = frozenset((sink, state.database) for sink, state in health.sinks.items())
            for sink, database in seen.sinks - sinks:  # removed, or its DSN moved
                self._sink_prepared.remove(namespace, pipeline, sink, database)
                self._sink_max_prepared.remove(namespace, pipeline, sink, database)
            for sink, state in health.sinks.items():
                labels = (namespace, pipeline, sink, state.database)
                self._sink_prepared.labels(*labels).set(state.prepared)
                self._sink_max_prepared.labels(*labels).set(state.max_prepared)
            seen.sinks = sinks

    def record_resolution(
        self, namespace: str, pipeline: str, committed: int, rolled_back: int
    ) -> None:
        """Count in-doubt transactions that recovery or the sweep committed or rolled back."""
        if committed < 0 or rolled_back < 0:
            raise ValueError(f"resolution counts must be >= 0, got {committed}, {rolled_back}")
        self._in_doubt_resolutions.labels(namespace, pipeline, "committed").inc(committed)
        self._in_doubt_resolutions.labels(namespace, pipeline, "rolled_back").inc(rolled_back)

    def record_fenced(self, namespace: str, pipeline: str, driver: str | None = None) -> None:
        """Count a driver that exited because a newer epoch fenced it out.

        ``driver`` (the pod name) makes the call idempotent: a pass that sees the same exited
        pod again, before its deletion is done, does not count it twice.
        """
        self._count_once(namespace, pipeline, "fenced", self._fenced_attempts, driver)

    def record_start_timeout(self, namespace: str, pipeline: str, driver: str) -> None:
        """Count a driver pod that did not start in time, once per pod (``driver``)."""
        self._count_once(namespace, pipeline, "start-timeout", self._start_timeouts, driver)

    def record_hung(self, namespace: str, pipeline: str, driver: str) -> None:
        """Count a Running driver restarted for making no progress, once per pod (``driver``)."""
        self._count_once(namespace, pipeline, "hung", self._hung_restarts, driver)

    def _count_once(
        self, namespace: str, pipeline: str, kind: str, counter: Counter, driver: str | None
    ) -> None:
        """Increment ``counter``, unless the same driver pod was the last one it counted."""
        key = (namespace, pipeline)
        with self._lock:
            seen = self._seen.get(key) or self._first_sight(namespace, pipeline, None)
            if driver is not None and seen.counted_drivers.get(kind) == driver:
                return
            if driver is not None:
                seen.counted_drivers[kind] = driver
            else:
                seen.counted_drivers.pop(kind, None)
            counter.labels(*key).inc()

    def record_recovery(self, namespace: str, pipeline: str, seconds: float) -> None:
        """Count one finished recovery and how long it took."""
        self._recoveries.labels(namespace, pipeline).inc()
        self._recovery_duration.labels(namespace, pipeline).observe(seconds)

    def leading(self, leads: bool) -> None:
        """Whether this replica now leads (reconciles) or waits as a standby."""
        self._leader.set(1 if leads else 0)

    def count_api_request(self, method: str) -> None:
        """Count one request to the Kubernetes API (``Kube``'s hook)."""
        self._api_requests.labels(method).inc()

    def finalized_without_sink(self, namespace: str, pipeline: str) -> None:
        """A deletion let go without its sink clean-up (never forgotten with the pipeline)."""
        self._finalized_without_sink.labels(namespace, pipeline).inc()

    def forget(self, namespace: str, pipeline: str) -> None:
        """Drop every series of a deleted pipeline, so label sets do not grow without bound."""
        with self._lock:
            self._seen.pop((namespace, pipeline), None)
            for metric in self._per_pipeline:
                metric.remove_by_labels({"namespace": namespace, "pipeline": pipeline})
            self._since_last_commit.forget(namespace, pipeline)
            self._since_last_progress.forget(namespace, pipeline)
        self.audit.forget(namespace, pipeline)

    @contextmanager
    def reconcile_timer(self, handler: Handler) -> Iterator[None]:
        """Time one handler run; a run that raises also counts as an error (and re-raises)."""
        if handler not in HANDLERS:
            raise ValueError(f"handler {handler!r} is not one of {', '.join(HANDLERS)}")
        started = time.perf_counter()
        try:
            yield
        except Exception:
            self._reconcile_errors.labels(handler).inc()
            raise
        finally:
            self._reconcile_duration.labels(handler).observe(time.perf_counter() - started)

    def exposition(self) -> bytes:
        """The registry in Prometheus text format, as a scrape would see it."""
        return generate_latest(self.registry)

    def serve(self, port: int, addr: str = "0.0.0.0") -> WSGIServer:  # noqa: S104
        """Serve /metrics on a daemon thread; port 0 picks a free port (see server_port)."""
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        return server

    def _first_sight(self, namespace: str, pipeline: str, guarantee: str | None) -> _Seen:
        """Create the event counters at 0 so increase() sees the first event, not a new series."""
        for outcome in OUTCOMES:
            self._in_doubt_resolutions.labels(namespace, pipeline, outcome)
        for metric in (
            self._fenced_attempts,
            self._start_timeouts,
            self._hung_restarts,
            self._recoveries,
            self._recovery_duration,
        ):
            metric.labels(namespace, pipeline)
        seen = _Seen(guarantee=guarantee)
        self._seen[(namespace, pipeline)] = seen
        return seen

    @staticmethod
    def _set_optional(gauge: Gauge, key: tuple[str, str], value: float | None) -> None:
        """Set a gauge, or drop its series when the value is not known (yet)."""
        if value is None:
            gauge.remove(*key)
        else:
            gauge.labels(*key).set(value)


def _advance(counter: Counter, previous_total: int, total: int) -> int:
    """Increase a counter by a status total's growth only; a smaller total is a new baseline.

    Status totals are recomputed (and some, like restarts, count inside a window), so they can
    shrink. A Prometheus counter must not: a shrink adds nothing and later growth is measured
    from the new value.
    """
    if total > previous_total:
        counter.inc(total - previous_total)
    return total
