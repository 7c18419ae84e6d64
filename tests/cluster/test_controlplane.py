"""The test control plane behaves like a real cluster where operator tests depend on it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from tests.cluster.binaries import ClusterToolsMissingError, find_binaries
from tests.cluster.plugin import KubeCluster
from tests.cluster.processes import wait_until

CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.test.eo.dev
spec:
  group: test.eo.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              required: [size]
              properties:
                size: {type: integer, minimum: 1}
                min: {type: integer}
                max: {type: integer}
              x-kubernetes-validations:
                - rule: "!has(self.min) || !has(self.max) || self.min <= self.max"
                  message: "min must not exceed max"
"""


def _widget(name: str, spec: dict[str, object]) -> dict[str, object]:
    return {
        "apiVersion": "test.eo.dev/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": spec,
    }


def _rejection(error: ApiException) -> str:
    return str(json.loads(error.body or "{}").get("message", ""))


def test_a_missing_build_fails_with_the_command_that_builds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EO_CLUSTER_BIN", str(tmp_path))
    with pytest.raises(ClusterToolsMissingError, match=r"make cluster-tools.*build-cluster-tools"):
        find_binaries()


def test_the_control_plane_starts_within_thirty_seconds(kube_cluster: KubeCluster) -> None:
    assert kube_cluster.startup_seconds < 30


def test_the_fake_node_is_ready_and_renews_its_lease(kube_cluster: KubeCluster) -> None:
    with kube_cluster.api() as api:
        node = client.CoreV1Api(api).read_node(kube_cluster.node_name)
        assert node.status is not None
        ready = [c.status for c in node.status.conditions or [] if c.type == "Ready"]
        assert ready == ["True"]
        leases = client.CoordinationV1Api(api)

        def renewed_at() -> object:
            lease = leases.read_namespaced_lease(kube_cluster.node_name, "kube-node-lease")
            return lease.spec.renew_time if lease.spec else None

        first = renewed_at()
        wait_until(lambda: renewed_at() != first, timeout=15, what="a lease renewal")


def test_a_crd_round_trips_and_the_apiserver_enforces_its_schema_and_cel_rules(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    kube_cluster.kubectl("apply", "-f", "-", input=CRD)
    kube_cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=30s", "crd/widgets.test.eo.dev"
    )
    with kube_cluster.api() as api:
        objects = client.CustomObjectsApi(api)

        def create(name: str, spec: dict[str, object]) -> object:
            return objects.create_namespaced_custom_object(
                "test.eo.dev", "v1", kube_namespace, "widgets", _widget(name, spec)
            )

        wait_until(
            lambda: _crd_served(objects, kube_namespace),
            timeout=30,
            what="the Widget resource to be served",
        )
        create("good", {"size": 3, "min": 1, "max": 2})
        stored = objects.get_namespaced_custom_object(
            "test.eo.dev", "v1", kube_namespace, "widgets", "good"
        )
        assert isinstance(stored, dict) and stored["spec"] == {"size": 3, "min": 1, "max": 2}

        with pytest.raises(ApiException) as too_small:
            create("small", {"size": 0})
        assert too_small.value.status == 422
        assert "spec.size" in _rejection(too_small.value)

        with pytest.raises(ApiException) as inverted:
            create("inverted", {"size": 1, "min": 5, "max": 2})
        assert inverted.value.status == 422
        assert "min must not exceed max" in _rejection(inverted.value)


def _crd_served(objects: client.CustomObjectsApi, namespace: str) -> bool:
    try:
        objects.list_namespaced_custom_object("test.eo.dev", "v1", namespace, "widgets")
    except ApiException:
        return False
    return True


def test_an_update_with_a_stale_resource_version_is_rejected_with_409(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    with kube_cluster.api() as api:
        core = client.CoreV1Api(api)
        created = core.create_namespaced_config_map(
            kube_namespace,
            client.V1ConfigMap(metadata=client.V1ObjectMeta(name="counter"), data={"n": "0"}),
        )
        fresh = core.read_namespaced_config_map("counter", kube_namespace)
        fresh.data = {"n": "1"}
        core.replace_namespaced_config_map("counter", kube_namespace, fresh)

        created.data = {"n": "stale"}
        with pytest.raises(ApiException) as conflict:
            core.replace_namespaced_config_map("counter", kube_namespace, created)
        assert conflict.value.status == 409
        assert core.read_namespaced_config_map("counter", kube_namespace).data == {"n": "1"}


def test_the_garbage_collector_deletes_a_child_after_its_owner(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    with kube_cluster.api() as api:
        core = client.CoreV1Api(api)
        owner = core.create_namespaced_config_map(
            kube_namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"))
        )
        assert owner.metadata is not None and owner.metadata.uid is not None
        reference = client.V1OwnerReference(
            api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid
        )
        core.create_namespaced_config_map(
            kube_namespace,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="child", owner_references=[reference])
            ),
        )

        def child_exists() -> bool:
            names = core.list_namespaced_config_map(kube_namespace).items
            return "child" in {cm.metadata.name for cm in names if cm.metadata}

        assert child_exists()
        core.delete_namespaced_config_map("owner", kube_namespace)
        wait_until(
            lambda: not child_exists(), timeout=60, what="garbage collection of the child ConfigMap"
        )


def test_rbac_denies_a_service_account_what_it_was_not_granted(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    ns = ["--namespace", kube_namespace]
    kube_cluster.kubectl("create", "serviceaccount", "reader", *ns)
    kube_cluster.kubectl(
        "create", "role", "read-configmaps", "--verb=get,list", "--resource=configmaps", *ns
    )
    kube_cluster.kubectl(
        "create",
        "rolebinding",
        "reader",
        "--role=read-configmaps",
        f"--serviceaccount={kube_namespace}:reader",
        *ns,
    )
    kube_cluster.kubectl("create", "configmap", "visible", "--from-literal=a=1", *ns)
    reader = kube_cluster.kubeconfig_for_service_account(kube_namespace, "reader")

    allowed = kube_cluster.kubectl(
        "get", "configmap", "visible", "-o", "name", *ns, kubeconfig=reader
    )
    assert allowed.stdout.strip() == "configmap/visible"

    denied = kube_cluster.kubectl(
        "create", "configmap", "nope", *ns, kubeconfig=reader, check=False
    )
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr
    assert f"system:serviceaccount:{kube_namespace}:reader" in denied.stderr

    token = kube_cluster.service_account_token(kube_namespace, "reader")
    with kube_cluster.api(token) as api, pytest.raises(ApiException) as secrets:
        client.CoreV1Api(api).list_namespaced_secret(kube_namespace)
    assert secrets.value.status == 403


def test_a_new_namespace_gets_the_cluster_root_ca(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    with kube_cluster.api() as api:
        core = client.CoreV1Api(api)
        deadline = time.monotonic() + 30
        while True:
            try:
                ca = core.read_namespaced_config_map("kube-root-ca.crt", kube_namespace)
                break
            except ApiException:
                assert time.monotonic() < deadline, "kube-root-ca.crt was never published"
                time.sleep(0.2)
    assert ca.data is not None
    assert ca.data["ca.crt"] == kube_cluster.control_plane.ca_cert.read_text()
