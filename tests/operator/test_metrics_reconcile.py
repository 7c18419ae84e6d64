"""The operator's pipeline metrics, fed through the real reconcile pass: a real API server, the
real decision log in PostgreSQL (written by the protocol's own ControlStore), the real Reconciler.

These are the checks a unit test with synthetic ``PipelineHealth`` values cannot make: that the
batch counters count real batches (not a running maximum of a 15-minute window), that no batch is
missing from the duration histograms, that phase/driver_up/restarts are published on every pass
even when the sink cannot be read or the spec is invalid, and that a fenced driver is counted.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from eo_jobs.pgserver import PgServer
from eo_jobs.protocol.control import ControlStore
from eo_operator.kube import Kube
from eo_operator.metrics import PHASES, PipelineMetrics
from eo_operator.reconciler import Reconciler, Settings
from eo_operator.resources import LABEL_EPOCH, LABEL_PIPELINE, MANAGED_BY
from tests.cluster.plugin import KubeCluster

NAME = "orders"


@dataclass
class Scene:
    cluster: KubeCluster
    namespace: str
    dsn: str
    reconciler: Reconciler
    metrics: PipelineMetrics

    @property
    def key(self) -> str:
        return f"{self.namespace}/{NAME}"

    def apply(self, **spec: Any) -> None:
        base: dict[str, Any] = {
            "source": {"files": {"path": "/tmp/in", "format": "json", "schema": "id BIGINT"}},
            "sinks": [
                {
                    "name": "ledger",
                    "postgres": {
                        "dsn": {"secretKeyRef": {"name": "ledger-db", "key": "dsn"}},
                        "table": "public.ledger",
                    },
                }
            ],
            "checkpoint": {"location": "/tmp/ckpt", "triggerIntervalSeconds": 10},
            "suspend": True,
        }
        base.update(spec)
        doc = {
            "apiVersion": "eo.dev/v1alpha1",
            "kind": "ExactlyOncePipeline",
            "metadata": {"name": NAME, "namespace": self.namespace},
            "spec": base,
        }
        self.cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))

    def reconcile(self) -> None:
        self.reconciler.reconcile(self.namespace, NAME)

    def value(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(
            name, {"namespace": self.namespace, "pipeline": NAME, **labels}
        )

    def control(self) -> ControlStore:
        return ControlStore(self.dsn)


@pytest.fixture
def scene(crd_installed: KubeCluster, kube_namespace: str, pg_server: PgServer) -> Iterator[Scene]:
    dsn = pg_server.create_database(kube_namespace.replace("-", "_"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.ledger (id bigint)")
    crd_installed.kubectl(
        "create",
        "secret",
        "generic",
        "ledger-db",
        "-n",
        kube_namespace,
        f"--from-literal=dsn={dsn}",
    )
    metrics = PipelineMetrics(CollectorRegistry())
    with crd_installed.api() as api:
        reconciler = Reconciler(Kube(api), metrics, Settings(job_image="eo-job:test"))
        # Every pass reads the decision log, also for a suspended (idle) pipeline, whose
        # health pass otherwise runs every idle_health_interval (120 s).
        reconciler.settings.health_interval = 0.0
        reconciler.settings.idle_health_interval = 0.0
        yield Scene(crd_installed, kube_namespace, dsn, reconciler, metrics)


def _suspended(scene: Scene) -> int:
    """Reconcile until the suspend recovery is done; the fence epoch it raised."""
    deadline = time.monotonic() + 60
    while True:
        scene.reconcile()
        if scene.value("eo_pipeline_phase", phase="Suspended") == 1:
            break
        assert time.monotonic() < deadline, "the pipeline never became Suspended"
        time.sleep(0.2)
    epoch = scene.control().fence_epoch(scene.key)
    assert epoch is not None
    return epoch


def _decide(
    control: ControlStore, pipeline: str, epoch: int, batches: range, commit: bool = True
) -> None:
    for batch in batches:
        control.decide(
            pipeline=pipeline,
            query_id="q1",
            batch_id=batch,
            epoch=epoch,
            participants=[f"eo1-{batch}"],
            source_offsets=None,
            rows_written=10,
            prepare_ms=1500.0,
        )
        if commit:
            control.mark_committed(pipeline, "q1", batch, commit_ms=100.0)


def _age_the_log(dsn: str, minutes: int) -> None:
    """Move every recorded batch and failure ``minutes`` into the past (time passing)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        shift = f"{minutes} minutes"
        conn.execute(
            "UPDATE eo.decisions SET decided_at = decided_at - %s::interval,"
            " committed_at = committed_at - %s::interval",
            (shift, shift),
        )
        conn.execute("UPDATE eo.failures SET failed_at = failed_at - %s::interval", (shift,))


def test_batch_and_failure_counters_count_every_real_batch_past_the_status_window(
    scene: Scene,
) -> None:
    scene.apply()
    epoch = _suspended(scene)
    control = scene.control()
    _decide(control, scene.key, epoch, range(0, 120))
    for _ in range(3):
        control.record_failure(scene.key, "boom", query_id="q1", batch_id=120, epoch=epoch)
    scene.reconcile()
    assert scene.value("eo_pipeline_batches_total") == 120
    assert scene.value("eo_pipeline_batch_failures_total") == 3
    # Twenty minutes later (the 15-minute status window has moved on), 30 more batches and one
    # more failure: a counter must grow by exactly that, not stay at a running maximum.
    _age_the_log(scene.dsn, 20)
    _decide(control, scene.key, epoch, range(120, 150))
    control.record_failure(scene.key, "boom", query_id="q1", batch_id=150, epoch=epoch)
    scene.reconcile()
    scene.reconcile()
    assert scene.value("eo_pipeline_batches_total") == 150
    assert scene.value("eo_pipeline_batch_failures_total") == 4
    control.close()


def test_every_batch_lands_in_the_duration_histograms_once_even_if_caught_mid_phase_two(
    scene: Scene,
) -> None:
    scene.apply()
    epoch = _suspended(scene)
    control = scene.control()
    _decide(control, scene.key, epoch, range(0, 150))
    _decide(control, scene.key, epoch, range(150, 151), commit=False)  # decided, phase 2 running
    scene.reconcile()
    assert scene.value("eo_pipeline_checkpoint_duration_seconds_count") == 150
    control.mark_committed(scene.key, "q1", 150, commit_ms=40_000.0)
    scene.reconcile()
    scene.reconcile()
    assert scene.value("eo_pipeline_checkpoint_duration_seconds_count") == 151
    assert scene.value("eo_pipeline_commit_duration_seconds_count") == 151
    # 150 x (1.5 s prepare + decide + 0.1 s commit) and one batch with a 40 s phase 2.
    assert scene.value("eo_pipeline_checkpoint_duration_seconds_bucket", le="30.0") == 150
    control.close()


def test_phase_is_published_on_every_pass_without_a_sink_and_with_an_invalid_spec(
    scene: Scene,
) -> None:
    scene.apply()
    _suspended(scene)
    scene.cluster.kubectl("delete", "secret", "ledger-db", "-n", scene.namespace)
    # A second sink with an env DSN passes the API server's schema but not the operator: the
    # spec is invalid, and the (first) sink's Secret is gone too.
    scene.apply(
        sinks=[
            {
                "name": "ledger",
                "postgres": {
                    "dsn": {"secretKeyRef": {"name": "ledger-db", "key": "dsn"}},
                    "table": "public.ledger",
                },
            },
            {
                "name": "audit",
                "postgres": {"dsn": {"env": "AUDIT_DSN"}, "table": "public.ledger"},
            },
        ]
    )
    scene.reconcile()
    phases = {p: scene.value("eo_pipeline_phase", phase=p) for p in PHASES}
    assert phases["Suspended"] == 0, phases
    assert phases["Failed"] == 1, phases
    assert scene.value("eo_pipeline_driver_up") == 0


def test_a_never_configured_sink_still_gives_phase_and_the_no_progress_clock(
    scene: Scene,
) -> None:
    scene.cluster.kubectl("delete", "secret", "ledger-db", "-n", scene.namespace)
    scene.apply(suspend=False)
    # The recovery before the first launch cannot read the Secret: the pass raises (the handler
    # loop logs it and retries), and the metrics of the pass are published before that.
    with contextlib.suppress(Exception):
        scene.reconcile()
    assert sum(scene.value("eo_pipeline_phase", phase=p) or 0 for p in PHASES) == 1
    since = scene.value("eo_pipeline_seconds_since_last_progress")
    assert since is not None and since >= 0
    assert scene.value("eo_pipeline_seconds_since_last_commit") is None


def test_a_driver_that_exits_fenced_is_counted_once(scene: Scene) -> None:
    scene.apply()
    epoch = _suspended(scene)
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{NAME}-driver-{epoch}",
            "namespace": scene.namespace,
            "labels": {
                MANAGED_BY: "eo",
                LABEL_PIPELINE: NAME,
                LABEL_EPOCH: str(epoch),
                "app.kubernetes.io/component": "driver",
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "driver",
                    "image": "eo-job:test",
                    "command": ["python", "-c", "raise SystemExit(75)"],
                }
            ],
        },
    }
    scene.cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
    # Resume, but stop right after the fenced exit is seen (re-suspend before a real driver).
    deadline = time.monotonic() + 60
    while True:
        shown = scene.cluster.kubectl(
            "get", "pod", "-n", scene.namespace, pod["metadata"]["name"], "-o", "json"
        )
        phase = json.loads(shown.stdout).get("status", {}).get("phase")
        if phase == "Failed":
            break
        assert time.monotonic() < deadline, f"the stand-in driver did not exit: {phase}"
        time.sleep(0.2)
    assert scene.value("eo_pipeline_fenced_attempts_total") == 0
    scene.apply(suspend=False)
    try:
        scene.reconcile()
    finally:
        scene.apply()
    scene.reconcile()
    assert scene.value("eo_pipeline_fenced_attempts_total") == 1
