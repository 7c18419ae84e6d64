"""A real node loss on the real control plane: the driver's node is partitioned (its kubelet
goes silent, the driver process runs on as a zombie), kube-controller-manager marks the node
Ready=Unknown, and the operator, after its node-lost grace, fences the zombie and relaunches
on the other node. Real Spark drivers, real PostgreSQL."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import psycopg
import pytest

from eo_jobs.protocol.errors import EXIT_FENCED
from tests.cluster.plugin import KubeCluster
from tests.cluster.processes import wait_until
from tests.operator.cluster_env import Operator, Scene, installed_operator

pytestmark = [pytest.mark.spark, pytest.mark.slow]

GRACE_SECONDS = 5
"""The operator's node-lost grace in this module (the chart's default is 30)."""
REPLACED_WITHIN = 60.0
"""From the partition to the relaunched driver's pod: the control plane's 15 s node-monitor
grace, the operator's 5 s, and margin for a loaded machine (a lost node used to go unnoticed
for ~6.5 minutes)."""
NEW_EPOCH_COMMITS_WITHIN = 90.0
"""From the partition to the first batch the relaunched driver decides, on a quiet machine.
Most of it is the new driver's Spark start, which the operator does not control: on a loaded
2-core machine that alone can take two minutes, so the test reports the figure and allows
``COMMIT_DEADLINE`` (a timed assertion would fail CI on load, not on a regression; the part the
operator controls is held to ``REPLACED_WITHIN``). Measured 2026-11-25 on 2 quiet cores: 31, 32
and 34 s (pod replaced at 19-20 s); at load average ~20, 120 s."""
COMMIT_DEADLINE = 300.0


@pytest.fixture(scope="module")
def operator(
    kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    """The chart's operator with a short node-lost grace (``operator.nodeLostGraceSeconds``)."""
    with installed_operator(
        kube_cluster,
        tmp_path_factory.mktemp("operator"),
        EO_NODE_LOST_GRACE_SECONDS=str(GRACE_SECONDS),
    ) as running:
        yield running


def _epoch(scene: Scene) -> int:
    return int(scene.get()["metadata"]["annotations"]["eo.dev/epoch"])


def _pod_epochs(scene: Scene) -> set[str]:
    return {p["metadata"]["labels"]["eo.dev/epoch"] for p in scene.pods()}


def _highest_decided_epoch(scene: Scene) -> int:
    with psycopg.connect(scene.dsn) as conn:
        row = conn.execute(
            "SELECT coalesce(max(epoch), 0) FROM eo.decisions WHERE pipeline = %s",
            (f"{scene.namespace}/{scene.name}",),
        ).fetchone()
    return int(row[0]) if row else 0


def _node_healthy(cluster: KubeCluster, node: str) -> bool:
    out = cluster.kubectl("get", "node", node, "-o", "json").stdout
    doc = json.loads(out)
    ready = [c["status"] for c in doc["status"].get("conditions", []) if c["type"] == "Ready"]
    return ready == ["True"] and not doc["spec"].get("taints")


def test_a_driver_on_a_partitioned_node_is_fenced_and_replaced_and_the_sink_stays_exact(
    scene: Scene,
) -> None:
    cluster, kubelet = scene.cluster, scene.cluster.kubelet
    scene.add_files(3)
    scene.apply()
    driver = scene.until("a running driver", scene.running_driver)
    zombie = driver["metadata"]["name"]
    assert driver["spec"]["nodeName"] == cluster.node_name
    tolerated = {t["key"]: t.get("tolerationSeconds") for t in driver["spec"]["tolerations"]}
    assert tolerated["node.kubernetes.io/unreachable"] == GRACE_SECONDS
    scene.until("first rows", lambda: scene.rows() > 0)

    partitioned_at = time.monotonic()
    kubelet.partition()
    try:
        scene.until("the operator fences the lost driver", lambda: _epoch(scene) >= 2, 120)
        # Input that only arrives after the fence: the zombie may try it, only epoch 2 decides.
        scene.add_files(3)
        scene.until("the relaunched driver's pod", lambda: "2" in _pod_epochs(scene), 30)
        replaced = time.monotonic() - partitioned_at
        assert replaced < REPLACED_WITHIN, f"replaced {replaced:.0f}s after the partition"
        scene.until(
            "a batch decided by the relaunched driver",
            lambda: _highest_decided_epoch(scene) >= 2,
            timeout=COMMIT_DEADLINE,
        )
        took = time.monotonic() - partitioned_at
        print(
            f"partition -> relaunched driver {replaced:.0f}s, -> its first decision {took:.0f}s "
            f"(target on a quiet machine: {NEW_EPOCH_COMMITS_WITHIN:.0f}s)"
        )
        relaunched = scene.until("the relaunched driver running", scene.running_driver)
        assert relaunched["spec"]["nodeName"] == cluster.spare.node_name
        assert relaunched["metadata"]["labels"]["eo.dev/epoch"] == "2"
        status = scene.status()
        assert status["restarts"] == 1 and status["lastFailure"]["pod"] == zombie
        assert f"its node {cluster.node_name} is Ready=Unknown" in status["lastFailure"]["message"]
        assert "DriverLost" in scene.events()
        scene.until("all records delivered", scene.all_delivered)
        # The zombie never heard of any of this: its next decision met the fence.
        scene.until(
            "the zombie to find itself fenced",
            lambda: kubelet.returncode(scene.namespace, zombie) is not None,
            timeout=180,
        )
        log = kubelet.logs(scene.namespace, zombie)
        assert kubelet.returncode(scene.namespace, zombie) == EXIT_FENCED, log[-3000:]
        assert "fenced" in log
    finally:
        kubelet.heal()
        wait_until(
            lambda: _node_healthy(cluster, cluster.node_name),
            timeout=60,
            what="the healed node Ready and untainted",
        )
    scene.until("nothing left prepared", lambda: scene.audit().prepared_left == 0, timeout=60)
    audit = scene.audit()
    assert (audit.duplicates, audit.missing, audit.unexpected, audit.prepared_left) == (0,) * 4
