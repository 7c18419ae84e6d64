"""RBAC rules flattened to grants, and the grants the operator and drivers are meant to have.

The tables here are the reviewed least-privilege design: a rendered rule that grants anything
beyond them, or misses one of them, fails the tests (offline and against a real API server).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CLUSTER = ""  # the scope of a grant made by a ClusterRoleBinding

Rules = dict[tuple[str, str], frozenset[str]]  # (apiGroup, resource) -> verbs

_READ = frozenset({"get", "list", "watch"})
_OWNED = _READ | {"create", "delete", "patch"}

# What the operator does inside every namespace it serves.
OPERATOR_NAMESPACED: Rules = {
    ("eo.dev", "exactlyoncepipelines"): _READ | {"patch", "update"},
    ("eo.dev", "exactlyoncepipelines/status"): frozenset({"get", "patch", "update"}),
    ("eo.dev", "exactlyoncepipelines/finalizers"): frozenset({"update"}),
    ("", "pods"): _OWNED,
    ("", "configmaps"): _OWNED,
    ("", "services"): _OWNED,
    ("", "secrets"): frozenset({"get"}),
    ("", "events"): frozenset({"create", "patch"}),
    ("events.k8s.io", "events"): frozenset({"create", "patch"}),
}
# kopf reads CRDs in either mode (a cluster-scoped resource).
KOPF_DISCOVERY: Rules = {("apiextensions.k8s.io", "customresourcedefinitions"): _READ}
# In either mode: the operator reads the node of a driver pod that is not Ready.
NODE_HEALTH: Rules = {("", "nodes"): frozenset({"get", "list"})}
# Cluster-wide mode only: kopf follows namespaces.
KOPF_CLUSTER: Rules = {("", "namespaces"): _READ}
# In the release namespace only: the leader-election Lease and the events on it.
LEADER_ELECTION: Rules = {
    ("coordination.k8s.io", "leases"): frozenset({"get", "create", "update"}),
    ("", "events"): frozenset({"create"}),
}

# What a Spark driver does in its own namespace (client mode): its executor pods and their
# configmap. No services: the operator creates the driver's Service, Spark creates none.
DRIVER: Rules = {
    ("", resource): frozenset({"create", "delete", "get", "list", "watch"})
    for resource in ("pods", "configmaps")
}


@dataclass(frozen=True, order=True)
class Grant:
    """One verb on one resource, cluster-wide (scope ``CLUSTER``) or in one namespace."""

    scope: str
    group: str
    resource: str
    verb: str


def grants_of(rules: Rules, scope: str) -> set[Grant]:
    """A rules table as grants in ``scope``."""
    return {
        Grant(scope, group, resource, verb)
        for (group, resource), verbs in rules.items()
        for verb in verbs
    }


def _rule_grants(rule: dict[str, Any], scope: str) -> set[Grant]:
    return {
        Grant(scope, group, resource, verb)
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }


def _binds(binding: dict[str, Any], account: str, namespace: str) -> bool:
    return any(
        subject["kind"] == "ServiceAccount"
        and subject["name"] == account
        and subject.get("namespace") == namespace
        for subject in binding.get("subjects", [])
    )


def granted(objects: list[dict[str, Any]], account: str, namespace: str) -> set[Grant]:
    """Every grant the rendered (Cluster)RoleBindings give ServiceAccount namespace/account."""
    roles = {
        (obj["kind"], obj["metadata"].get("namespace", CLUSTER), obj["metadata"]["name"]): obj
        for obj in objects
        if obj["kind"] in {"Role", "ClusterRole"}
    }
    result: set[Grant] = set()
    for binding in objects:
        if binding["kind"] not in {"RoleBinding", "ClusterRoleBinding"}:
            continue
        if not _binds(binding, account, namespace):
            continue
        scope = binding["metadata"].get("namespace", CLUSTER)
        ref = binding["roleRef"]
        role_namespace = CLUSTER if ref["kind"] == "ClusterRole" else scope
        role = roles[(ref["kind"], role_namespace, ref["name"])]
        for rule in role.get("rules", []):
            result |= _rule_grants(rule, scope)
    return result


def operator_expected(watch_namespaces: list[str], release_namespace: str) -> set[Grant]:
    """The operator's complete grants in cluster-wide mode (no namespaces) or namespaced mode."""
    expected = grants_of(LEADER_ELECTION, release_namespace)
    if not watch_namespaces:
        return expected | grants_of(
            OPERATOR_NAMESPACED | KOPF_DISCOVERY | NODE_HEALTH | KOPF_CLUSTER, CLUSTER
        )
    expected |= grants_of(KOPF_DISCOVERY | NODE_HEALTH, CLUSTER)
    for namespace in watch_namespaces:
        expected |= grants_of(OPERATOR_NAMESPACED, namespace)
    return expected


def describe(grants: set[Grant]) -> list[str]:
    """Grants grouped per scope and resource, for reports and failure messages."""
    merged: dict[tuple[str, str, str], set[str]] = {}
    for grant in grants:
        merged.setdefault((grant.scope or "cluster", grant.group, grant.resource), set()).add(
            grant.verb
        )
    return [
        f"{scope}: {group or 'core'}/{resource}: {','.join(sorted(verbs))}"
        for (scope, group, resource), verbs in sorted(merged.items())
    ]
