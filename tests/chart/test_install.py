"""The chart installs into a real API server, grants the operator exactly what it needs,
upgrades, and uninstalls cleanly.

Helm itself (helm-python-sdk: Helm's Go library) installs the chart, CRDs first; the API
server then judges every object (schemas, RBAC escalation checks) and ``kubectl auth can-i``
asks the RBAC authorizer what the chart's ServiceAccounts may do, with their own tokens.
The operator is installed with 0 replicas: its Deployment is validated and stored, but the
process kubelet of the test cluster runs only ``restartPolicy: Never`` pods.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from tests.chart import rbac
from tests.chart.helm import CHART, ROOT, set_values
from tests.cluster.plugin import KubeCluster

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("chart-install")]

CRDS = ("exactlyoncepipelines.eo.dev",)
# Verbs the operator was never granted: each must be denied, wherever asked.
ALL = "--all-namespaces"
DENIED: list[tuple[str, ...]] = [
    ("delete", "secrets", ALL),
    ("list", "secrets", ALL),
    ("create", "secrets", ALL),
    ("create", "clusterroles.rbac.authorization.k8s.io"),
    ("create", "rolebindings.rbac.authorization.k8s.io", ALL),
    ("create", "customresourcedefinitions.apiextensions.k8s.io"),
    ("delete", "exactlyoncepipelines.eo.dev", ALL),
    ("update", "pods", ALL),
    ("create", "pods", "--subresource=exec", ALL),
    ("create", "deployments.apps", ALL),
    ("impersonate", "serviceaccounts", ALL),
]


@dataclass
class Release:
    """An installed release and what it takes to ask questions about it."""

    name: str
    namespace: str
    manifest: str
    helm: helm_python.Config

    @property
    def operator_account(self) -> str:
        return f"{self.name}-operator"

    def objects(self) -> list[dict[str, Any]]:
        """The objects Helm applied (its stored manifest)."""
        return [doc for doc in yaml.safe_load_all(self.manifest) if doc]


def _suffix() -> str:
    return secrets.token_hex(3)


@pytest.fixture
def make_release(kube_cluster: KubeCluster) -> Iterator[Callable[..., Release]]:
    """Install releases of the chart (each in a fresh namespace); remove them afterwards."""
    created: list[Release] = []
    namespaces: list[str] = []
    with contextlib.ExitStack() as cleanup:

        def install(*expressions: str, watch: int = 0) -> Release:
            suffix = _suffix()
            name, namespace = f"eo-{suffix}", f"eo-system-{suffix}"
            watched = [f"eo-team-{suffix}-{i}" for i in range(watch)]
            for extra in watched:
                kube_cluster.kubectl("create", "namespace", extra)
            namespaces.extend([namespace, *watched])
            helm = cleanup.enter_context(
                helm_python.Config(kubeconfig_path=kube_cluster.kubeconfig, namespace=namespace)
            )
            values = set_values(
                "operator.replicaCount=0",
                *([f"operator.watchNamespaces={{{','.join(watched)}}}"] if watched else []),
                *expressions,
            )
            summary = helm.install(
                str(CHART), name, values, namespace=namespace, create_namespace=True, timeout=120
            )
            release = Release(name, namespace, summary["manifest"], helm)
            created.append(release)
            return release

        yield install
        for release in created:
            with contextlib.suppress(helm_python.HelmError):
                release.helm.uninstall(release.name, ignore_not_found=True, timeout=120)
        for namespace in namespaces:
            kube_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _kubectl_resource(group: str, resource: str) -> tuple[str, list[str]]:
    """``kubectl auth can-i`` spelling of a resource (``name.group``, ``--subresource``)."""
    base, _, sub = resource.partition("/")
    name = f"{base}.{group}" if group else base
    return name, [f"--subresource={sub}"] if sub else []


def can_i(cluster: KubeCluster, kubeconfig: Path, verb: str, resource: str, *scope: str) -> bool:
    """``kubectl auth can-i`` as the identity of ``kubeconfig``: yes (exit 0) or no (exit 1)."""
    done = cluster.kubectl(
        "auth", "can-i", verb, resource, *scope, kubeconfig=kubeconfig, check=False
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode == 0


def allowed_everywhere_expected(
    cluster: KubeCluster, kubeconfig: Path, expected: set[rbac.Grant], cluster_scoped: set[str]
) -> list[str]:
    """The expected grants that ``kubectl auth can-i`` denies (should be none)."""
    refused: list[str] = []
    for grant in sorted(expected):
        resource, flags = _kubectl_resource(grant.group, grant.resource)
        if grant.resource in cluster_scoped:
            scope: list[str] = []
        elif grant.scope == rbac.CLUSTER:
            scope = ["--all-namespaces"]
        else:
            scope = ["--namespace", grant.scope]
        if not can_i(cluster, kubeconfig, grant.verb, resource, *flags, *scope):
            refused.append(f"{grant.verb} {resource} {' '.join(flags + scope)}")
    return refused


CLUSTER_SCOPED = {"customresourcedefinitions", "namespaces"}


def test_every_object_and_crd_is_accepted_by_the_api_server(
    kube_cluster: KubeCluster, make_release: Callable[..., Release]
) -> None:
    release = make_release(
        "operator.serviceAccount.annotations.team=streaming",
        "driver.serviceAccount.annotations.team=streaming",
    )
    for crd in CRDS:
        kube_cluster.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    objects = release.objects()
    assert len(objects) == 14
    stored = kube_cluster.kubectl("get", "-f", "-", "-o", "name", input=release.manifest)
    assert len(stored.stdout.split()) == len(objects)
    example = (ROOT / "examples" / "orders-ledger.yaml").read_text()
    kube_cluster.kubectl("apply", "--server-side", "--dry-run=server", "-f", "-", input=example)


# Every kind of rule the networkPolicy values render: CIDRs, selectors, a pod selector alone,
# several databases, the object store, scrapers, and extra rules of each kind.
NETWORK_POLICY_VALUES = (
    "networkPolicy.egress.enabled=true",
    "networkPolicy.metrics.namespaceSelector.kubernetes\\.io/metadata\\.name=monitoring",
    "networkPolicy.metrics.podSelector.app=prometheus",
    "networkPolicy.egress.apiServer.cidrs={10.0.0.1/32,fd00::1/128}",
    "networkPolicy.egress.dns.podSelector.k8s-app=kube-dns",
    "networkPolicy.egress.databases[0].cidrs={10.20.0.5/32}",
    "networkPolicy.egress.databases[0].ports={5432}",
    "networkPolicy.egress.databases[1].namespaceSelector.kubernetes\\.io/metadata\\.name=shop",
    "networkPolicy.egress.databases[1].podSelector.app=mariadb",
    "networkPolicy.egress.databases[1].ports={3306,3307}",
    "networkPolicy.egress.kafka[0].cidrs={10.30.0.0/24}",
    "networkPolicy.egress.kafka[0].ports={9093}",
    "networkPolicy.egress.objectStorage[0].cidrs={10.40.0.10/32}",
    "networkPolicy.egress.objectStorage[0].ports={9000}",
    "networkPolicy.operator.extraIngress[0].ports[0].port=15090",
    "networkPolicy.driver.extraIngress[0].ports[0].port=sidecar",
    "networkPolicy.executor.extraEgress[0].to[0].ipBlock.cidr=10.50.0.0/16",
)


def test_the_api_server_stores_every_network_policy_rule_the_values_render(
    kube_cluster: KubeCluster, make_release: Callable[..., Release]
) -> None:
    # Validation only: no network plugin enforces NetworkPolicy in the test cluster.
    release = make_release(*NETWORK_POLICY_VALUES, watch=1)
    rendered = [o for o in release.objects() if o["kind"] == "NetworkPolicy"]
    assert sorted(o["metadata"]["name"].rsplit("-", 1)[1] for o in rendered) == [
        "driver",
        "executor",
        "operator",
    ]
    for obj in rendered:
        metadata = obj["metadata"]
        stored = kube_cluster.kubectl(
            "get", "networkpolicy", metadata["name"], "-n", metadata["namespace"], "-o", "json"
        )
        # The API server adds only the default protocol (TCP) of the ports that name none.
        assert json.loads(stored.stdout)["spec"] == _with_default_protocol(obj["spec"])


def _with_default_protocol(spec: dict[str, Any]) -> dict[str, Any]:
    spec = json.loads(json.dumps(spec))
    for direction in ("ingress", "egress"):
        for rule in spec.get(direction, []):
            for port in rule.get("ports", []):
                port.setdefault("protocol", "TCP")
    return spec


def test_the_cluster_wide_operator_can_do_each_verb_it_needs_and_nothing_else(
    kube_cluster: KubeCluster, make_release: Callable[..., Release]
) -> None:
    release = make_release()
    kubeconfig = kube_cluster.kubeconfig_for_service_account(
        release.namespace, release.operator_account
    )
    expected = rbac.operator_expected([], release.namespace)
    assert allowed_everywhere_expected(kube_cluster, kubeconfig, expected, CLUSTER_SCOPED) == []
    granted_by_mistake = [
        " ".join(question) for question in DENIED if can_i(kube_cluster, kubeconfig, *question)
    ]
    assert granted_by_mistake == []


def test_drivers_manage_pods_in_their_namespace_but_cannot_read_secrets_or_leave_it(
    kube_cluster: KubeCluster, make_release: Callable[..., Release]
) -> None:
    release = make_release(watch=1)
    [team] = [
        o["metadata"]["namespace"]
        for o in release.objects()
        if o["kind"] == "ServiceAccount" and o["metadata"]["name"].endswith("-driver")
    ]
    kubeconfig = kube_cluster.kubeconfig_for_service_account(team, f"{release.name}-driver")
    expected = rbac.grants_of(rbac.DRIVER, team)
    assert allowed_everywhere_expected(kube_cluster, kubeconfig, expected, set()) == []
    assert not can_i(kube_cluster, kubeconfig, "get", "secrets", "--namespace", team)
    assert not can_i(kube_cluster, kubeconfig, "create", "pods", "--namespace", release.namespace)
    assert not can_i(
        kube_cluster, kubeconfig, "patch", "exactlyoncepipelines.eo.dev", "--namespace", team
    )


def test_an_upgrade_to_namespaced_mode_moves_the_grants_into_the_watched_namespaces(
    kube_cluster: KubeCluster, make_release: Callable[..., Release]
) -> None:
    release = make_release()
    suffix = _suffix()
    watched = [f"eo-team-{suffix}-a", f"eo-team-{suffix}-b"]
    for namespace in watched:
        kube_cluster.kubectl("create", "namespace", namespace)
    try:
        values = set_values(
            "operator.replicaCount=0",
            f"operator.watchNamespaces={{{','.join(watched)}}}",
        )
        summary = release.helm.upgrade(
            str(CHART), release.name, values, namespace=release.namespace, timeout=120
        )
        assert summary["revision"] == 2
        kubeconfig = kube_cluster.kubeconfig_for_service_account(
            release.namespace, release.operator_account
        )
        expected = rbac.operator_expected(watched, release.namespace)
        assert (
            allowed_everywhere_expected(
                kube_cluster, kubeconfig, expected, {"customresourcedefinitions"}
            )
            == []
        )
        assert not can_i(
            kube_cluster, kubeconfig, "create", "pods", "--namespace", release.namespace
        )
        assert not can_i(kube_cluster, kubeconfig, "list", "pods", "--all-namespaces")
        assert not can_i(kube_cluster, kubeconfig, "list", "namespaces")
        deployment = kube_cluster.kubectl(
            "get",
            "deployment",
            f"{release.name}-operator",
            "--namespace",
            release.namespace,
            "-o",
            "jsonpath={.spec.template.spec.containers[0].args}",
        )
        assert all(f"--namespace={namespace}" in deployment.stdout for namespace in watched)
    finally:
        for namespace in watched:
            kube_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_uninstall_leaves_no_operator_object_behind_but_keeps_the_crds(
    kube_cluster: KubeCluster, make_release: Callable[..., Release]
) -> None:
    release = make_release(watch=2)
    objects = release.objects()
    release.helm.uninstall(release.name, timeout=120)
    left = [
        f"{o['kind']}/{o['metadata']['name']}"
        for o in objects
        if kube_cluster.kubectl(
            "get",
            o["kind"].lower(),
            o["metadata"]["name"],
            *(["--namespace", o["metadata"]["namespace"]] if "namespace" in o["metadata"] else []),
            check=False,
        ).returncode
        == 0
    ]
    assert left == []
    labelled = kube_cluster.kubectl(
        "get",
        "clusterroles,clusterrolebindings",
        "-o",
        "name",
        "-l",
        f"app.kubernetes.io/instance={release.name}",
    )
    assert labelled.stdout.strip() == ""
    for crd in CRDS:
        kube_cluster.kubectl("get", "crd", crd)
