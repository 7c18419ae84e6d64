"""The operator's lifecycle on a real control plane: launch, crash, restart, suspend, delete,
invalid specs (a zombie on a lost node: test_operator_node_loss_cluster.py). Real
kube-apiserver, real Spark drivers, real PostgreSQL."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.monitoring.prometheus_binaries import running_prometheus
from tests.operator.cluster_env import (
    Scene,
    alerts,
    query,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _epoch(scene: Scene) -> int:
    return int(scene.get()["metadata"]["annotations"]["eo.dev/epoch"])


def test_an_applied_pipeline_launches_a_driver_and_commits_every_record(scene: Scene) -> None:
    scene.add_files(4)
    scene.apply()
    scene.until("phase Running", lambda: scene.status().get("phase") == "Running")
    scene.until("all records delivered", scene.all_delivered)
    scene.until(
        "status shows the last batch", lambda: scene.status().get("lastBatchId") is not None
    )
    audit = scene.audit()
    assert (audit.duplicates, audit.missing, audit.prepared_left) == (0, 0, 0)
    table = scene.cluster.kubectl("get", "eop", "-n", scene.namespace).stdout
    for column in ("PHASE", "EPOCH", "LAST BATCH", "LAST COMMIT", "RESTARTS", "AGE"):
        assert column in table
    assert "Running" in table
    assert "Recovered" in scene.events() and "Launched" in scene.events()
    assert scene.status()["epoch"] == _epoch(scene) == 1
    scene.until(
        "the operator's audit finds no violation",
        lambda: any(
            c["type"] == "Audited" and c["status"] == "True"
            for c in scene.status().get("conditions", [])
        ),
    )
    # kubectl shows the verdict in its own column.
    header, row = scene.cluster.kubectl("get", "eop", "-n", scene.namespace).stdout.splitlines()
    assert row[header.index("AUDITED") :].split()[0] == "True", (header, row)


def test_a_killed_driver_is_fenced_recovered_and_relaunched_with_a_higher_epoch(
    scene: Scene,
) -> None:
    scene.add_files(3)
    scene.apply()
    driver = scene.until("a running driver", scene.running_driver)
    scene.until("first rows", lambda: scene.rows() > 0)
    scene.add_files(3)
    scene.cluster.kubelet.kill(scene.namespace, driver["metadata"]["name"], signal.SIGKILL)
    scene.until(
        "epoch 2 driver running",
        lambda: (
            (d := scene.running_driver()) is not None
            and d["metadata"]["labels"]["eo.dev/epoch"] == "2"
        ),
    )
    scene.add_files(2)
    scene.until("all records delivered", scene.all_delivered)
    time.sleep(3)
    audit = scene.audit()
    assert (audit.duplicates, audit.missing, audit.unexpected, audit.prepared_left) == (0,) * 4
    status = scene.status()
    assert status["restarts"] == 1 and status["epoch"] == 2
    assert "DriverFailed" in scene.events()


def test_an_operator_killed_between_fence_and_launch_completes_that_recovery_once(
    scene: Scene,
) -> None:
    operator = scene.operator
    scene.add_files(2)
    scene.apply()
    driver = scene.until("a running driver", scene.running_driver)
    scene.until("first rows", lambda: scene.rows() > 0)
    operator.stop()
    try:
        scene.cluster.kubelet.kill(scene.namespace, driver["metadata"]["name"], signal.SIGKILL)
        operator.start(EO_OPERATOR_FAULT="after-fence")
        assert operator.proc is not None
        assert operator.proc.wait(240) == -signal.SIGKILL, operator.output()[-4000:]
        assert _epoch(scene) == 2
        assert scene.running_driver() is None
    finally:
        operator.start()
    scene.until(
        "epoch 2 driver running",
        lambda: (
            (d := scene.running_driver()) is not None
            and d["metadata"]["labels"]["eo.dev/epoch"] == "2"
        ),
    )
    assert _epoch(scene) == 2
    scene.add_files(2)
    scene.until("all records delivered", scene.all_delivered)
    time.sleep(3)
    audit = scene.audit()
    assert (audit.duplicates, audit.missing, audit.prepared_left) == (0, 0, 0)


def test_suspend_stops_the_driver_and_resolves_then_resume_relaunches(scene: Scene) -> None:
    scene.add_files(2)
    scene.apply()
    scene.until("a running driver", scene.running_driver)
    scene.until("first rows", lambda: scene.rows() > 0)
    scene.cluster.kubectl(
        "patch",
        "eop",
        scene.name,
        "-n",
        scene.namespace,
        "--type=merge",
        "-p",
        '{"spec": {"suspend": true}}',
    )
    scene.until(
        "Suspended", lambda: scene.status().get("phase") == "Suspended" and not scene.pods()
    )
    assert scene.audit().prepared_left == 0
    suspended_epoch = _epoch(scene)
    scene.add_files(2)
    scene.cluster.kubectl(
        "patch",
        "eop",
        scene.name,
        "-n",
        scene.namespace,
        "--type=merge",
        "-p",
        '{"spec": {"suspend": false}}',
    )
    scene.until("running again", scene.running_driver)
    scene.until("all records delivered", scene.all_delivered)
    assert _epoch(scene) == suspended_epoch
    audit = scene.audit()
    assert (audit.duplicates, audit.missing) == (0, 0)


def test_deleting_a_pipeline_stops_the_driver_and_leaves_nothing_prepared(scene: Scene) -> None:
    scene.add_files(2)
    scene.apply()
    scene.until("a running driver", scene.running_driver)
    scene.until("first rows", lambda: scene.rows() > 0)
    scene.cluster.kubectl("delete", "eop", scene.name, "-n", scene.namespace, "--wait=false")
    scene.until(
        "the pipeline gone",
        lambda: (
            scene.name
            not in scene.cluster.kubectl("get", "eop", "-n", scene.namespace, "-o", "name").stdout
        ),
        timeout=240,
    )
    assert not scene.pods()
    assert scene.audit().prepared_left == 0
    with psycopg.connect(scene.dsn) as conn:
        fence = conn.execute("SELECT epoch FROM eo.fence").fetchone()
    assert fence is not None and fence[0] >= 2


def test_a_spec_the_operator_rejects_gets_a_condition_and_an_event(scene: Scene) -> None:
    sinks = [
        {"name": "orders", "postgres": {"dsn": {"env": "ORDERS_DSN"}, "table": "public.orders"}}
    ]
    scene.apply(sinks=sinks)
    scene.until(
        "SpecValid False",
        lambda: any(
            c["type"] == "SpecValid" and c["status"] == "False"
            for c in scene.status().get("conditions", [])
        ),
    )
    status = scene.status()
    assert status["phase"] == "Failed"
    message = next(c["message"] for c in status["conditions"] if c["type"] == "SpecValid")
    assert "spec.sinks[0].postgres.dsn" in message and "secretKeyRef" in message
    assert "InvalidSpec" in scene.events()
    assert not scene.pods()


def active_alert(prometheus: str, namespace: str, name: str) -> dict[str, Any] | None:
    """The pending or firing alert ``name`` for ``namespace``, if Prometheus has one."""
    return next(
        (
            a
            for a in alerts(prometheus)
            if a["labels"]["alertname"] == name and a["labels"].get("namespace") == namespace
        ),
        None,
    )


def until_alert(scene: Scene, prometheus: str, name: str) -> dict[str, Any]:
    """Wait (up to 120 s) until alert ``name`` is pending or firing for the scene's pipeline."""
    found: dict[str, Any] = scene.until(
        name, lambda: active_alert(prometheus, scene.namespace, name), timeout=120
    )
    return found


@contextlib.contextmanager
def kill_driver_under_prometheus(scene: Scene, tmp_path: Path) -> Iterator[str]:
    """Run the pipeline to delivery, start Prometheus on the operator, SIGKILL the driver."""
    scene.add_files(2)
    driver = scene.until("a running driver", scene.running_driver)
    scene.until("all records delivered", scene.all_delivered)
    with running_prometheus(scene.operator.metrics_port, tmp_path) as prometheus:
        scene.until(
            "batches in the operator metrics",
            lambda: any(
                s["metric"].get("pipeline") == scene.name
                for s in query(prometheus, "eo_pipeline_last_batch_id")
            ),
        )
        scene.cluster.kubelet.kill(scene.namespace, driver["metadata"]["name"], signal.SIGKILL)
        yield prometheus


def test_prometheus_scraping_the_operator_raises_the_stalled_alert_while_the_driver_stays_down(
    scene: Scene, tmp_path: Path
) -> None:
    """Live: real Prometheus, the shipped rules, the real operator's endpoint, a real failure.

    The driver is killed and its relaunch held back by a 10-minute backoff, so the pipeline
    stays down but is not Failed: with alerts.noCommitFloorSeconds 5 the no-commit alert
    becomes pending within seconds (its `for: 2m` keeps it from firing) and stays pending,
    while EoPipelineFailed stays silent.
    """
    scene.apply(
        restartPolicy={"maxRestarts": 5, "backoffSeconds": 600, "maxBackoffSeconds": 600},
        alerts={"noCommitFloorSeconds": 5},
    )
    with kill_driver_under_prometheus(scene, tmp_path) as prometheus:
        scene.until("phase Backoff", lambda: scene.status().get("phase") == "Backoff")
        stalled = until_alert(scene, prometheus, "EoNoRecentCommit")
        assert stalled["state"] == "pending"
        assert f"{scene.namespace}/{scene.name}" in stalled["annotations"]["description"]
        time.sleep(5)  # five more evaluations: it stays pending while the driver stays down
        again = active_alert(prometheus, scene.namespace, "EoNoRecentCommit")
        assert again is not None and again["state"] == "pending"
        assert active_alert(prometheus, scene.namespace, "EoPipelineFailed") is None
        assert scene.status().get("phase") == "Backoff"


def test_a_failed_pipeline_pages_as_failed_not_as_stalled(scene: Scene, tmp_path: Path) -> None:
    """Live: once the restart budget is spent (maxRestarts 0), EoPipelineFailed pages, and
    EoNoRecentCommit, which the shipped rule keeps out of phase Failed so one outage pages
    once, is not active once Prometheus has seen the phase."""
    scene.apply(
        restartPolicy={"maxRestarts": 0, "backoffSeconds": 1, "maxBackoffSeconds": 1},
        alerts={"noCommitFloorSeconds": 5},
    )
    with kill_driver_under_prometheus(scene, tmp_path) as prometheus:
        scene.until("phase Failed", lambda: scene.status().get("phase") == "Failed")
        failed = until_alert(scene, prometheus, "EoPipelineFailed")
        assert failed["state"] in ("pending", "firing")
        time.sleep(3)  # three more evaluations with the Failed phase scraped
        assert active_alert(prometheus, scene.namespace, "EoNoRecentCommit") is None
