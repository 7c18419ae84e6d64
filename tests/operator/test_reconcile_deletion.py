"""Deletion through the real Reconciler (real API server, real PostgreSQL, no operator process):
it always finishes, bounded, and no reconcile launches a driver for an object being deleted."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from eo_jobs.pgserver import free_port
from eo_operator.deletion import SKIP_ANNOTATION, CleanupPending
from eo_operator.kube import Kube
from tests.operator.reconcile_env import NAME, Scene

pytestmark = [pytest.mark.slow]

HOLD = "eo.dev/test-hold"
"""A finalizer of the test's own: the deleted object stays, with its deletionTimestamp."""


@pytest.fixture
def scene(reconcile_scene: Scene) -> Iterator[Scene]:
    """The reconcile scene; whatever the test held with ``HOLD`` is let go afterwards."""
    yield reconcile_scene
    reconcile_scene.cluster.kubectl(
        "patch", "eop", NAME, "-n", reconcile_scene.namespace, "--type=merge",
        "-p", '{"metadata": {"finalizers": null}}', check=False,
    )  # fmt: skip


def _delete(scene: Scene) -> None:
    scene.cluster.kubectl("delete", "eop", NAME, "-n", scene.namespace, "--wait=false")


def _unreachable_sink(scene: Scene) -> None:
    dsn = f"host=127.0.0.1 port={free_port()} dbname=nowhere user=eo connect_timeout=2"
    patch = json.dumps({"stringData": {"dsn": dsn}})
    scene.cluster.kubectl("patch", "secret", "ledger-db", "-n", scene.namespace, "-p", patch)


class DeletedAfterRead(Kube):
    """The real client; the pipeline is really deleted right after each read of it."""

    def get_pipeline(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = super().get_pipeline(namespace, name)
        self.custom.delete_namespaced_custom_object(
            "eo.dev", "v1alpha1", namespace, "exactlyoncepipelines", name
        )
        return found


def test_a_reconcile_never_launches_for_a_pipeline_deleted_after_it_was_read(
    scene: Scene,
) -> None:
    scene.apply(metadata={"finalizers": [HOLD]}, suspend=False)
    scene.reconciler.kube = DeletedAfterRead(scene.reconciler.kube.api_client)
    scene.reconcile()
    assert scene.get()["metadata"].get("deletionTimestamp")
    assert scene.pods() == []


def test_the_finalizer_reserves_its_epoch_on_the_object_above_the_fence(scene: Scene) -> None:
    scene.apply(metadata={"finalizers": [HOLD]})
    while scene.get().get("status", {}).get("phase") != "Suspended":
        scene.reconcile()
    assert scene.annotation() == 1
    _delete(scene)
    summary = scene.reconciler.finalize(scene.namespace, NAME)
    assert scene.annotation() == 2, summary
    assert scene.control().fence_epoch(scene.key) == 2
    assert "Finalized" in scene.events()


def test_deleting_with_an_unreachable_sink_retries_then_lets_go_with_the_recover_command(
    scene: Scene,
) -> None:
    scene.apply(metadata={"finalizers": [HOLD], "annotations": {"eo.dev/epoch": "4"}})
    _unreachable_sink(scene)
    scene.reconciler.settings.delete_sink_timeout = 3.0
    _delete(scene)
    with pytest.raises(CleanupPending) as pending:
        scene.reconciler.finalize(scene.namespace, NAME)
    assert 1.0 <= pending.value.delay <= 3.0
    time.sleep(3.5)
    started = time.monotonic()
    message = scene.reconciler.finalize(scene.namespace, NAME)
    assert time.monotonic() - started < 15
    assert "eo recover <pipeline manifest> --epoch 5" in message
    assert "EO_SINK_LEDGER_DSN" in message
    events = scene.events()
    assert "FinalizedWithoutSink" in events and "--epoch 5" in events


def test_the_skip_annotation_lets_a_deletion_go_at_once_without_the_sink(scene: Scene) -> None:
    scene.apply(metadata={"finalizers": [HOLD], "annotations": {SKIP_ANNOTATION: "true"}})
    _unreachable_sink(scene)
    scene.reconciler.settings.delete_sink_timeout = 300.0
    _delete(scene)
    message = scene.reconciler.finalize(scene.namespace, NAME)
    assert SKIP_ANNOTATION in message and "eo recover" in message
    assert "FinalizedWithoutSink" in scene.events()


def test_a_dsn_that_does_not_parse_never_reaches_the_event(scene: Scene) -> None:
    secret = "hunter2-not-a-conninfo"
    patch = json.dumps({"stringData": {"dsn": secret}})
    scene.apply(metadata={"finalizers": [HOLD]})
    scene.cluster.kubectl("patch", "secret", "ledger-db", "-n", scene.namespace, "-p", patch)
    scene.reconciler.settings.delete_sink_timeout = 0.0
    _delete(scene)
    message = scene.reconciler.finalize(scene.namespace, NAME)
    assert "not a valid connection string" in message
    assert secret not in message and secret not in scene.events()


def test_a_dsn_value_libpq_refuses_after_parsing_never_reaches_the_event(scene: Scene) -> None:
    # A password pasted into the port: libpq parses the string, then quotes the bad value.
    secret = "hunter2-in-the-port"
    dsn = f"host=127.0.0.1 port={secret} dbname=x user=eo"
    patch = json.dumps({"stringData": {"dsn": dsn}})
    scene.apply(metadata={"finalizers": [HOLD]})
    scene.cluster.kubectl("patch", "secret", "ledger-db", "-n", scene.namespace, "-p", patch)
    scene.reconciler.settings.delete_sink_timeout = 0.0
    _delete(scene)
    message = scene.reconciler.finalize(scene.namespace, NAME)
    assert "FinalizedWithoutSink" in scene.events()
    assert secret not in message and secret not in scene.events()


def test_deleting_after_an_edit_to_an_invalid_spec_recovers_with_the_last_launched_spec(
    scene: Scene,
) -> None:
    scene.apply(metadata={"finalizers": [HOLD]}, suspend=False)
    deadline = time.monotonic() + 60
    while not scene.pods():
        assert time.monotonic() < deadline, scene.get().get("status")
        scene.reconcile()
        time.sleep(1)
    assert scene.control().fence_epoch(scene.key) == 1
    # An edit the CRD accepts but the operator cannot run (an env reference on Kubernetes):
    # the driver keeps its last valid spec (rule 1), and deleting the pipeline then stops it,
    # whose grace may expire mid-batch with a prepared transaction.
    first = {
        "name": "ledger",
        "postgres": {
            "dsn": {"secretKeyRef": {"name": "ledger-db", "key": "dsn"}},
            "table": "public.ledger",
        },
    }
    local = {"name": "audit", "postgres": {"dsn": {"env": "AUDIT_DSN"}, "table": "public.a"}}
    sinks = [first, local]
    scene.apply(metadata={"finalizers": [HOLD]}, suspend=False, sinks=sinks)
    running = scene.pods()
    scene.reconcile()
    status = scene.get()["status"]
    assert status["reason"] == "InvalidSpec" and status["phase"] != "Failed", status
    spec_valid = next(c for c in status["conditions"] if c["type"] == "SpecValid")
    assert spec_valid["status"] == "False" and "spec.sinks[1].postgres.dsn" in spec_valid["message"]
    assert "InvalidSpec" in scene.events()
    assert scene.pods() == running  # not stopped
    _delete(scene)
    message = scene.reconciler.finalize(scene.namespace, NAME)
    assert "nothing to resolve" not in message
    assert (scene.control().fence_epoch(scene.key) or 0) >= 2, message
