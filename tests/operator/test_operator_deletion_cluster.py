"""Deletion on the real control plane always finishes: a whole namespace with a running
pipeline, a pipeline whose sink cannot be reached; and a pipeline deleted and re-created under
the same name starts again above the fence its finalizer left, with the sink exact."""

from __future__ import annotations

import json
import time
import urllib.request

import psycopg
import pytest

from eo_jobs.pgserver import free_port
from eo_jobs.protocol.gid import Gid
from eo_jobs.sinks.postgres.writer import PostgresWriter
from tests.operator.cluster_env import SYSTEM, Scene

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _gone(scene: Scene) -> bool:
    out = scene.cluster.kubectl("get", "eop", "-n", scene.namespace, "-o", "name")
    return scene.name not in out.stdout


def _fence(scene: Scene) -> int:
    with psycopg.connect(scene.dsn) as conn:
        row = conn.execute("SELECT epoch FROM eo.fence").fetchone()
    assert row is not None
    return int(row[0])


def _delete_namespace(scene: Scene) -> None:
    """Delete the scene's namespace and wait until it is gone (180 s at most)."""
    scene.cluster.kubectl("delete", "namespace", scene.namespace, "--wait=false")

    def namespace_gone() -> bool:
        found = scene.cluster.kubectl("get", "namespace", scene.namespace, check=False)
        return found.returncode != 0 and "NotFound" in found.stderr

    try:
        scene.until("the namespace gone", namespace_gone, timeout=180)
    finally:
        # The fixture deletes the namespace after the test: give it one to delete.
        scene.cluster.kubectl("create", "namespace", scene.namespace, check=False)


def test_deleting_a_namespace_holding_a_running_pipeline_completes(scene: Scene) -> None:
    scene.add_files(2)
    scene.apply()
    scene.until("a running driver", scene.running_driver)
    scene.until("first rows", lambda: scene.rows() > 0)
    started = time.monotonic()
    _delete_namespace(scene)
    assert time.monotonic() - started < 180
    time.sleep(3)
    assert scene.audit().prepared_left == 0


def _prepare_a_task(scene: Scene) -> str:
    """A writer task of the running driver's next batch, prepared and never decided (the batch
    its grace cut short): under the driver's own epoch and owner, so only a fence and resolve
    above that epoch can finish it."""
    key = f"{scene.namespace}/{scene.name}"
    with psycopg.connect(scene.dsn) as conn:
        fence = conn.execute("SELECT epoch FROM eo.fence WHERE pipeline = %s", (key,)).fetchone()
        last = conn.execute(
            "SELECT query_id, max(batch_id) FROM eo.decisions WHERE pipeline = %s "
            "GROUP BY query_id",
            (key,),
        ).fetchone()
    assert fence is not None and last is not None
    gid = str(
        Gid.build(
            pipeline=key,
            query_id=last[0],
            sink="orders",
            epoch=int(fence[0]),
            batch=int(last[1]) + 1,
            task=0,
            attempt=0,
        )
    )
    writer = PostgresWriter(
        dsn=scene.dsn, table="public.orders", columns=("order_id", "merchant", "amount_cents")
    )
    writer.write([(-1, "m", 1)], gid=gid, pipeline=key, batch_id=int(last[1]) + 1)
    return gid


def test_a_namespace_deleted_with_a_task_left_prepared_is_resolved_with_the_dsn_it_remembered(
    scene: Scene,
) -> None:
    """Operator audit N5: a namespace deletion removes the Secret while the pipeline's
    finalizer has yet to use it (the namespace controller deletes pods first, then the Secret
    and the pipeline together: a race). With the Secret gone, the finalizer fences and
    resolves with the DSN this operator read before, instead of letting go with the
    transaction in doubt."""
    scene.add_files(2)
    scene.apply()
    scene.until("a running driver", scene.running_driver)
    scene.until("first rows", lambda: scene.rows() > 0)
    left = _prepare_a_task(scene)
    # The Secret goes first, as `kubectl delete -f` of a folder may order it, or as the
    # namespace controller may when it deletes the Secret and the pipeline at once.
    scene.cluster.kubectl("delete", "secret", "orders-db", "-n", scene.namespace)
    _delete_namespace(scene)
    with psycopg.connect(scene.dsn) as conn:
        prepared = [r[0] for r in conn.execute("SELECT gid FROM pg_prepared_xacts")]
    assert left not in prepared, scene.operator.output()[-3000:]
    assert scene.audit().prepared_left == 0
    said = scene.operator.output()
    assert "using the value of key dsn this operator read last" in said
    # The module's operator also serves the other deletion tests: this pipeline's line only.
    assert f"{scene.namespace}/{scene.name} deleted without sink clean-up" not in said


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
        # Also where it outlives the pipeline's namespace: the operator pod's events, a counter.
        on_operator = scene.cluster.kubectl(
            "get",
            "events",
            "-n",
            SYSTEM,
            "--field-selector",
            "reason=FinalizedWithoutSink",
            "-o",
            "json",
        ).stdout
        key = f"{scene.namespace}/{scene.name}"
        assert any(
            key in e["message"] and "eo recover" in e["message"]
            for e in json.loads(on_operator)["items"]
        ), on_operator
        url = f"http://127.0.0.1:{operator.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as got:
            exposed = got.read().decode()
        counted = (
            "eo_operator_finalized_without_sink_total{"
            f'namespace="{scene.namespace}",pipeline="{scene.name}"}} 1.0'
        )
        assert counted in exposed, exposed
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
