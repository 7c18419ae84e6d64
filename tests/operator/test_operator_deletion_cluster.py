"""Deletion on the real control plane always finishes: a whole namespace with a running
pipeline, a pipeline whose sink cannot be reached; and a pipeline deleted and re-created under
the same name starts again above the fence its finalizer left, with the sink exact."""

from __future__ import annotations

import json
import time

import psycopg
import pytest

from eo_jobs.pgserver import free_port
from tests.operator.cluster_env import Scene

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _gone(scene: Scene) -> bool:
    out = scene.cluster.kubectl("get", "eop", "-n", scene.namespace, "-o", "name")
    return scene.name not in out.stdout


def _fence(scene: Scene) -> int:
    with psycopg.connect(scene.dsn) as conn:
        row = conn.execute("SELECT epoch FROM eo.fence").fetchone()
    assert row is not None
    return int(row[0])


def test_deleting_a_namespace_holding_a_running_pipeline_completes(scene: Scene) -> None:
    scene.add_files(2)
    scene.apply()
    scene.until("a running driver", scene.running_driver)
    scene.until("first rows", lambda: scene.rows() > 0)
    started = time.monotonic()
    scene.cluster.kubectl("delete", "namespace", scene.namespace, "--wait=false")

    def namespace_gone() -> bool:
        found = scene.cluster.kubectl("get", "namespace", scene.namespace, check=False)
        return found.returncode != 0 and "NotFound" in found.stderr

    try:
        scene.until("the namespace gone", namespace_gone, timeout=180)
    finally:
        # The fixture deletes the namespace after the test: give it one to delete.
        scene.cluster.kubectl("create", "namespace", scene.namespace, check=False)
    assert time.monotonic() - started < 180
    time.sleep(3)
    assert scene.audit().prepared_left == 0


def test_deleting_a_pipeline_whose_sink_is_unreachable_finishes_after_the_bounded_wait(
    scene: Scene,
) -> None:
    operator = scene.operator
    operator.stop()
    operator.start(EO_DELETE_SINK_TIMEOUT_SECONDS="15")
    try:
        nowhere = f"host=127.0.0.1 port={free_port()} dbname=orders user=eo connect_timeout=2"
        patch = json.dumps({"stringData": {"dsn": nowhere}})
        scene.cluster.kubectl("patch", "secret", "orders-db", "-n", scene.namespace, "-p", patch)
        scene.apply()
        scene.until("the operator tried the sink", lambda: scene.status().get("phase"))
        started = time.monotonic()
        scene.cluster.kubectl("delete", "eop", scene.name, "-n", scene.namespace, "--wait=false")
        scene.until("the pipeline gone", lambda: _gone(scene), timeout=120)
        assert time.monotonic() - started >= 10  # it did retry the sink first
        events = scene.events()
        assert "FinalizedWithoutSink" in events and "eo recover" in events, events
    finally:
        operator.stop()
        operator.start()


def test_a_deleted_and_recreated_pipeline_starts_above_the_fence_and_stays_exact(
    scene: Scene,
) -> None:
    scene.add_files(2)
    scene.apply()
    scene.until("a running driver", scene.running_driver)
    scene.until("first rows", lambda: scene.rows() > 0)
    scene.cluster.kubectl("delete", "eop", scene.name, "-n", scene.namespace, "--wait=false")
    scene.until("the pipeline gone", lambda: _gone(scene), timeout=240)
    fenced = _fence(scene)
    scene.add_files(2)
    scene.apply()  # the same manifest again (a GitOps re-sync, a helm reinstall)
    driver = scene.until("a running driver again", scene.running_driver)
    assert int(driver["metadata"]["labels"]["eo.dev/epoch"]) > fenced
    scene.add_files(2)
    scene.until("all records delivered", scene.all_delivered)
    time.sleep(3)
    audit = scene.audit()
    assert (audit.duplicates, audit.missing, audit.unexpected, audit.prepared_left) == (0,) * 4
