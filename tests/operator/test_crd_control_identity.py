"""The API server keeps the decision log where it is: the control database cannot move."""

from __future__ import annotations

import json
from typing import Any

import yaml

from tests.cluster.plugin import KubeCluster


def _pipeline(name: str, namespace: str, sinks: list[str], control: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "source": {"files": {"path": "/data/in", "format": "json", "schema": "id BIGINT"}},
        "sinks": [
            {
                "name": sink,
                "postgres": {
                    "dsn": {"secretKeyRef": {"name": f"{sink}-db", "key": "dsn"}},
                    "table": "public.ledger",
                },
            }
            for sink in sinks
        ],
        "checkpoint": {"location": "/data/checkpoint"},
        "suspend": True,
    }
    if control is not None:
        spec["control"] = {"dsn": {"secretKeyRef": {"name": control, "key": "dsn"}}}
    return {
        "apiVersion": "eo.dev/v1alpha1",
        "kind": "ExactlyOncePipeline",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def _apply(cluster: KubeCluster, document: dict[str, Any], check: bool = True) -> Any:
    return cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(document), check=check)


def test_reordering_the_sinks_without_an_explicit_control_database_is_rejected(
    crd_installed: KubeCluster, kube_namespace: str
) -> None:
    _apply(crd_installed, _pipeline("ledger", kube_namespace, ["a", "b"], None))
    result = _apply(
        crd_installed, _pipeline("ledger", kube_namespace, ["b", "a"], None), check=False
    )
    assert result.returncode != 0
    assert "first sink's database holds the decision log" in result.stderr, result.stderr
    # Adding a sink at the end keeps the first one: accepted.
    _apply(crd_installed, _pipeline("ledger", kube_namespace, ["a", "b", "c"], None))


def test_an_explicit_control_database_cannot_be_changed_or_removed(
    crd_installed: KubeCluster, kube_namespace: str
) -> None:
    _apply(crd_installed, _pipeline("ctl", kube_namespace, ["a", "b"], "control-db"))
    _apply(crd_installed, _pipeline("ctl", kube_namespace, ["b", "a"], "control-db"))
    for control in ("other-db", None):
        document = _pipeline("ctl", kube_namespace, ["b", "a"], control)
        result = _apply(crd_installed, document, check=False)
        assert result.returncode != 0, json.dumps(document)
        assert "spec.control is immutable" in result.stderr, result.stderr
