"""One pipeline in two clusters on one database: never two drivers at once, an explicit hand-over.

Two control planes (each its own etcd, kube-apiserver, controller-manager and process kubelets)
with an operator each, and one PostgreSQL. The same manifest, applied in both as a DR pair fed
from one GitOps repository would be: cluster A runs it; cluster B waits with the reason and the
hand-over in its status and never launches a driver; after the hand-over (the
``eo.dev/adopt-fence`` annotation in B naming A's object) B runs above A's epoch, A's driver is
fenced and A waits in turn, and every record lands exactly once.

The second control plane is started by this module only (about as much as the session's own:
one etcd, one kube-apiserver, one controller-manager, two kubelet threads).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from eo_jobs.pgserver import PgServer
from eo_jobs.protocol.control import ControlStore
from eo_jobs.protocol.errors import EXIT_FENCED
from tests.cluster.plugin import KubeCluster, start_cluster
from tests.operator.cluster_env import Operator, Scene, installed_operator, make_scene

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster_b(
    kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeCluster]:
    """A second control plane with its kubelets (``kube_cluster`` first: A is up before B)."""
    cluster, clients = start_cluster(tmp_path_factory.mktemp("kube-cluster-b"))
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(cluster.control_plane.stop)
        for api in clients:
            cleanup.enter_context(api)
        cleanup.callback(cluster.stop_kubelets)
        yield cluster


@pytest.fixture(scope="module")
def operator_b(
    cluster_b: KubeCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    """The chart and the operator in cluster B."""
    with installed_operator(cluster_b, tmp_path_factory.mktemp("operator-b")) as running:
        yield running


def _namespace(cluster: KubeCluster, name: str) -> None:
    with cluster.api() as api:
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        deadline = time.monotonic() + 30
        while not core.list_namespaced_service_account(
            name, field_selector="metadata.name=default"
        ).items:
            assert time.monotonic() < deadline, f"no default ServiceAccount in {name}"
            time.sleep(0.1)


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


def _epoch(pod: dict[str, Any]) -> int:
    return int(pod["metadata"]["labels"]["eo.dev/epoch"])


def test_the_same_pipeline_in_a_second_cluster_waits_until_the_fence_is_handed_over(
    kube_cluster: KubeCluster,
    operator: Operator,
    cluster_b: KubeCluster,
    operator_b: Operator,
    kube_namespace: str,
    pg_server: PgServer,
    tmp_path: Path,
) -> None:
    dsn = pg_server.create_database(kube_namespace.replace("-", "_"))
    a = make_scene(kube_cluster, operator, kube_namespace, dsn, tmp_path)
    _namespace(cluster_b, kube_namespace)
    cluster_b.kubectl(
        "create", "secret", "generic", "orders-db", "-n", kube_namespace,
        f"--from-literal=dsn={dsn}",
    )  # fmt: skip
    # The same namespace, name, input and checkpoint (shared storage, as a DR pair has).
    b = Scene(cluster_b, operator_b, kube_namespace, dsn, tmp_path, truth=a.truth)

    a.add_files(3)
    a.apply()
    first = a.until("A's driver running", a.running_driver)
    a.until("A's first rows", lambda: a.rows() > 0)
    uid_a = a.get()["metadata"]["uid"]

    b.apply()
    waiting = b.until(
        "B waiting for the fence",
        lambda: b.status() if b.status().get("phase") == "Waiting" else None,
        timeout=120,
    )
    owned = _condition(waiting, "FenceOwned")
    assert (owned.get("status"), owned.get("reason")) == ("False", "ForeignFenceOwner"), waiting
    assert f"owned by {uid_a}" in owned["message"]
    assert f"annotate eop orders eo.dev/adopt-fence={uid_a}" in owned["message"]
    assert "ForeignFenceOwner" in b.events()
    time.sleep(10)  # a few more of B's passes: still nothing launched, no epoch reserved
    assert b.pods() == [] and b.status()["phase"] == "Waiting"
    assert "eo.dev/epoch" not in (b.get()["metadata"].get("annotations") or {})
    assert a.running_driver() is not None

    b.cluster.kubectl(
        "annotate", "eop", "orders", "-n", kube_namespace, f"eo.dev/adopt-fence={uid_a}"
    )
    second = b.until("B's driver running", b.running_driver)
    assert _epoch(second) > _epoch(first)
    fence = ControlStore(dsn).fence(f"{kube_namespace}/orders")
    assert fence is not None and fence.owner == b.get()["metadata"]["uid"]
    assert fence.epoch == _epoch(second)
    assert "FenceAdopted" in b.events()

    # A's driver is fenced at its next batch (exit 75); A then waits for the fence in turn.
    a.add_files(3)
    a.until("A waiting", lambda: a.status().get("phase") == "Waiting", timeout=180)
    exits = [
        (s.get("state") or {}).get("terminated", {}).get("exitCode")
        for p in a.pods()
        for s in (p.get("status") or {}).get("containerStatuses") or []
    ]
    assert set(exits) <= {EXIT_FENCED}, exits  # fenced, or already deleted after it
    assert (
        f"owned by {b.get()['metadata']['uid']}" in _condition(a.status(), "FenceOwned")["message"]
    )
    assert a.running_driver() is None

    a.add_files(2)
    b.until("all records delivered by B", b.all_delivered)
    time.sleep(3)
    audit = b.audit()
    assert (audit.duplicates, audit.missing, audit.unexpected, audit.prepared_left) == (0,) * 4
    b.apply(suspend=True)  # B's driver stops before its cluster does
