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
    assert len(objects) == 11
    stored = kube_cluster.kubectl("get", "-f", "-", "-o", "name", input=release.manifest)
    assert len(stored.stdout.split()) == len(objects)
    example = (ROOT / "examples" / "orders-ledger.yaml").read_text()
    kube_cluster.kubectl("apply", "--server-side", "--dry-run=server", "-f", "-", input=example)


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
