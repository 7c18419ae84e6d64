"""Every pod the chart renders is locked down, and RBAC grants exactly the reviewed verbs."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart import rbac
from tests.chart.helm import NAMESPACE, PROFILES, pod_specs, render, render_profile, set_values

RBAC_KINDS = {"Role", "ClusterRole"}
RULE_FIELDS = ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs")


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_pod_runs_as_uid_10001_with_no_privileges_and_a_read_only_root(
    profile: str,
) -> None:
    specs = list(pod_specs(render_profile(profile)))
    assert specs, "the chart renders no pod template"
    for name, spec in specs:
        pod: dict[str, Any] = spec["securityContext"]
        assert pod["runAsNonRoot"] is True, name
        assert pod["runAsUser"] == 10001, name
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in spec["containers"] + spec.get("initContainers", []):
            context = container["securityContext"]
            where = f"{name} container {container['name']}"
            assert context["runAsNonRoot"] is True, where
            assert context["runAsUser"] == 10001, where
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["readOnlyRootFilesystem"] is True, where
            assert context["capabilities"] == {"drop": ["ALL"]}, where
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}, where
            assert context.get("privileged", False) is False, where


def test_the_read_only_operator_gets_a_writable_tmp_and_bounded_resources() -> None:
    [(_, spec)] = list(pod_specs(render()))
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    container = spec["containers"][0]
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}
    assert "memory" in container["resources"]["limits"]


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_no_rbac_rule_uses_a_wildcard(profile: str) -> None:
    for obj in render_profile(profile):
        if obj["kind"] not in RBAC_KINDS:
            continue
        for rule in obj["rules"]:
            for field in RULE_FIELDS:
                assert not any("*" in item for item in rule.get(field, [])), (
                    f"{obj['kind']}/{obj['metadata']['name']} {field}: {rule[field]}"
                )


def test_cluster_wide_the_operator_gets_exactly_the_reviewed_cluster_grants() -> None:
    granted = rbac.granted(render(), "eo-operator", NAMESPACE)
    expected = rbac.operator_expected([], NAMESPACE)
    assert rbac.describe(granted) == rbac.describe(expected)


def test_namespaced_the_operator_gets_roles_per_namespace_and_only_crd_and_node_reads() -> None:
    objects = render(set_values("operator.watchNamespaces={team-a,team-b}"))
    granted = rbac.granted(objects, "eo-operator", NAMESPACE)
    assert rbac.describe(granted) == rbac.describe(
        rbac.operator_expected(["team-a", "team-b"], NAMESPACE)
    )
    cluster_wide = {grant for grant in granted if grant.scope == rbac.CLUSTER}
    assert {grant.resource for grant in cluster_wide} == {"customresourcedefinitions", "nodes"}
    assert {grant.verb for grant in cluster_wide if grant.resource == "nodes"} == {"get", "list"}


def test_secrets_are_only_ever_read_one_by_one() -> None:
    for profile in PROFILES:
        secrets = {
            grant.verb
            for grant in rbac.granted(render_profile(profile), "eo-operator", NAMESPACE)
            if grant.resource == "secrets"
        }
        assert secrets == {"get"}, profile


def test_drivers_manage_executors_in_their_own_namespace_and_nothing_else() -> None:
    objects = render(set_values("operator.watchNamespaces={team-a,team-b}"))
    for namespace in ("team-a", "team-b"):
        granted = rbac.granted(objects, "eo-driver", namespace)
        assert granted == rbac.grants_of(rbac.DRIVER, namespace)


def test_without_rbac_creation_the_chart_renders_no_role_or_binding() -> None:
    objects = render(set_values("operator.rbac.create=false", "driver.rbac.create=false"))
    assert not [o for o in objects if "Role" in o["kind"]]
