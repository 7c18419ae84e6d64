"""The chart lints clean and renders the objects each values profile asks for."""

from __future__ import annotations

from collections import Counter

import helm_python
import pytest

from tests.chart.helm import (
    CHART,
    NAMESPACE,
    PROFILES,
    find,
    kinds,
    render,
    render_profile,
    set_values,
)

WARNING = 2  # helm lint severities: 1 info, 2 warning, 3 error

# Objects per kind for each profile (CRDs are in crds/, not rendered: see test_sync).
# NetworkPolicies: the operator's, and a driver and an executor one per pipeline namespace.
CLUSTER_WIDE = Counter(
    ServiceAccount=2, ClusterRole=1, ClusterRoleBinding=1, Role=2, RoleBinding=2,
    Deployment=1, Service=1, PodDisruptionBudget=1, NetworkPolicy=3,
)  # fmt: skip
# Two watched namespaces: an operator Role + RoleBinding in each, the drivers'
# ServiceAccount + Role + RoleBinding in each, a ClusterRole left only for CRD reads, and the
# leader-election Role + RoleBinding in the release namespace.
NAMESPACED_TWO = Counter(
    ServiceAccount=3, ClusterRole=1, ClusterRoleBinding=1, Role=5, RoleBinding=5,
    Deployment=1, Service=1, PodDisruptionBudget=1, NetworkPolicy=5,
)  # fmt: skip
# ConfigMaps: the Grafana dashboard and the Grafana alert rules.
MONITORING = Counter(ServiceMonitor=1, PodMonitor=1, PrometheusRule=1, ConfigMap=2)
EXPECTED_KINDS: dict[str, Counter[str]] = {
    "default": CLUSTER_WIDE,
    "all-features": CLUSTER_WIDE + MONITORING,
    "namespaced": NAMESPACED_TWO,
    "namespaced-all-features": NAMESPACED_TWO + MONITORING,
}


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_helm_lint_finds_no_warning_or_error(profile: str) -> None:
    report = helm_python.lint(CHART, set_values(*PROFILES[profile]), strict=True)
    problems = [m for m in report["messages"] if m["severity"] >= WARNING]
    assert report["errors"] == []
    assert problems == []


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_each_profile_renders_exactly_its_objects(profile: str) -> None:
    objects = render_profile(profile)
    assert kinds(objects) == EXPECTED_KINDS[profile]
    names = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects]
    assert len(names) == len(set(names)), "two objects share kind, namespace and name"


def test_namespaced_objects_live_in_the_release_namespace_or_a_watched_one() -> None:
    for obj in render_profile("namespaced"):
        namespace = obj["metadata"].get("namespace")
        if obj["kind"] in {"ClusterRole", "ClusterRoleBinding"}:
            assert namespace is None
        else:
            assert namespace in {NAMESPACE, "team-a", "team-b"}, obj["metadata"]


def test_the_operator_runs_eo_operator_with_leader_election_ports_namespaces_and_workers() -> None:
    objects = render(
        set_values(
            "operator.watchNamespaces={team-a,team-b}",
            "operator.replicaCount=2",
            "operator.leaderElection.leaseName=blue",
            "operator.leaderElection.leaseDurationSeconds=20",
            "operator.workers=16",
        )
    )
    deployment = find(objects, "Deployment", "eo-operator")
    assert deployment["spec"]["replicas"] == 2
    # The Lease keeps old and new pods from acting together: a rollout need not stop both.
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "eo-operator:0.1.0"
    assert container["args"] == [
        "operator",
        "--leader-election=blue",
        "--lease-duration=20",
        "--renew-deadline=10",
        "--retry-period=2",
        "--namespace=team-a",
        "--namespace=team-b",
        "--metrics-port=9090",
        "--liveness-port=8080",
        "--workers=16",
    ]
    identity = next(e for e in container["env"] if e["name"] == "POD_NAME")
    assert identity["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"metrics": 9090, "healthz": 8080}
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    assert not [o for o in objects if o["kind"].endswith("KopfPeering")]
    lease_role = find(objects, "Role", "eo-leader")
    assert lease_role["metadata"]["namespace"] == NAMESPACE
    assert find(objects, "PodDisruptionBudget", "eo-operator")["spec"]["maxUnavailable"] == 1


def test_the_lease_is_named_after_the_release_by_default() -> None:
    container = find(render(), "Deployment", "eo-operator")["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert "--leader-election=eo-operator" in container["args"]


def test_a_renew_deadline_that_outlasts_the_lease_is_refused() -> None:
    with pytest.raises(Exception, match="renewDeadlineSeconds < leaseDurationSeconds"):
        render(set_values("operator.leaderElection.renewDeadlineSeconds=15"))


def test_the_operator_learns_the_job_image_the_driver_account_and_its_namespace() -> None:
    objects = render(
        set_values(
            "driver.image.repository=registry.example/eo-job",
            "driver.image.tag=1.2.3",
            "driver.serviceAccount.name=spark",
        )
    )
    container = find(objects, "Deployment", "eo-operator")["spec"]["template"]["spec"][
        "containers"
    ][0]
    env = {item["name"]: item for item in container["env"]}
    assert env["EO_JOB_IMAGE"]["value"] == "registry.example/eo-job:1.2.3"
    assert env["EO_DRIVER_SERVICE_ACCOUNT"]["value"] == "spark"
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    find(objects, "ServiceAccount", "spark", NAMESPACE)


def test_driver_accounts_go_to_driver_namespaces_then_watched_ones_then_the_release_one() -> None:
    def driver_namespaces(*expressions: str) -> set[str]:
        return {
            o["metadata"]["namespace"]
            for o in render(set_values(*expressions))
            if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == "eo-driver"
        }

    assert driver_namespaces() == {NAMESPACE}
    assert driver_namespaces("operator.watchNamespaces={a,b}") == {"a", "b"}
    assert driver_namespaces("operator.watchNamespaces={a,b}", "driver.namespaces={c}") == {"c"}


def test_standby_replicas_prefer_other_nodes_and_a_single_replica_has_no_affinity() -> None:
    def affinity(*expressions: str) -> object:
        deployment = find(render(set_values(*expressions)), "Deployment", "eo-operator")
        return deployment["spec"]["template"]["spec"].get("affinity")

    assert affinity() is None
    spread = affinity("operator.replicaCount=2")
    assert isinstance(spread, dict)
    term = spread["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"


def test_the_metrics_service_and_servicemonitor_select_the_operator_pods() -> None:
    objects = render(set_values("operator.serviceMonitor.enabled=true"))
    deployment = find(objects, "Deployment", "eo-operator")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    service = find(objects, "Service", "eo-operator")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    monitor = find(objects, "ServiceMonitor", "eo-operator")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    pdb = find(objects, "PodDisruptionBudget", "eo-operator")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_the_podmonitor_selects_driver_pods_in_every_watched_namespace() -> None:
    enabled = "driver.podMonitor.enabled=true"
    cluster_wide = find(render(set_values(enabled)), "PodMonitor", "eo-driver")
    assert cluster_wide["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/component": "driver",
        "app.kubernetes.io/managed-by": "eo",
    }
    assert cluster_wide["spec"]["namespaceSelector"] == {"any": True}
    namespaced = find(
        render(set_values(enabled, "operator.watchNamespaces={a,b}")), "PodMonitor", "eo-driver"
    )
    assert namespaced["spec"]["namespaceSelector"] == {"matchNames": ["a", "b"]}


def test_a_servicemonitor_without_the_metrics_service_is_refused() -> None:
    with pytest.raises(helm_python.HelmRenderError, match=r"operator\.service\.enabled"):
        render(set_values("operator.serviceMonitor.enabled=true", "operator.service.enabled=false"))


def test_a_release_named_after_the_chart_is_not_prefixed_twice() -> None:
    names = {o["metadata"]["name"] for o in render(release="prod")}
    assert "prod-eo-operator" in names
    names = {o["metadata"]["name"] for o in render(release="eo-prod")}
    assert "eo-prod-operator" in names


@pytest.mark.parametrize("release", ["r" * 53, "eo" + "x" * 51])
def test_every_name_fits_a_dns_label_even_for_the_longest_release_name(release: str) -> None:
    for obj in render(set_values("operator.serviceMonitor.enabled=true"), release=release):
        name = obj["metadata"]["name"]
        assert len(name) <= 63, f"{obj['kind']} {name}"
        assert not name.endswith("-"), f"{obj['kind']} {name}"
