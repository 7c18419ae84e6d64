"""spec.lifecycle on a real kube-apiserver: the CEL rule mirrors the model's (a start-over of a
kafka source starting from earliest needs allowReread), and the nonce pattern is enforced."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.cluster.plugin import KubeCluster


def _pipeline(source: dict[str, Any], lifecycle: dict[str, Any]) -> str:
    return json.dumps(
        {
            "apiVersion": "eo.dev/v1alpha1",
            "kind": "ExactlyOncePipeline",
            "metadata": {"name": "lifecycle"},
            "spec": {
                "source": source,
                "sinks": [
                    {
                        "name": "ledger",
                        "postgres": {
                            "dsn": {"secretKeyRef": {"name": "db", "key": "dsn"}},
                            "table": "public.ledger",
                        },
                    }
                ],
                "checkpoint": {"location": "/ckpt"},
                "lifecycle": lifecycle,
            },
        }
    )


FILES = {"files": {"path": "/in", "format": "json", "schema": "id BIGINT"}}
KAFKA = {"kafka": {"bootstrapServers": "k:9092", "topics": ["t"], "schema": "id BIGINT"}}
LATEST = {"kafka": {**KAFKA["kafka"], "startingOffsets": "latest"}}


@pytest.mark.parametrize(
    ("source", "lifecycle", "accepted", "said"),
    [
        (FILES, {"startOver": {"nonce": "n1"}, "snapshot": {"nonce": "s1"}}, True, ""),
        (KAFKA, {"startOver": {"nonce": "n1"}}, False, "allowReread"),
        (KAFKA, {"startOver": {"nonce": "n1", "allowReread": True}}, True, ""),
        (LATEST, {"startOver": {"nonce": "n1"}}, True, ""),
        (KAFKA, {"snapshot": {"nonce": "s1"}}, True, ""),
        (FILES, {"snapshot": {"nonce": "Not_A_Folder"}}, False, "nonce"),
        (FILES, {"retention": 0}, False, "retention"),
    ],
)
def test_the_api_server_applies_the_lifecycle_rules(
    crd_installed: KubeCluster,
    kube_namespace: str,
    source: dict[str, Any],
    lifecycle: dict[str, Any],
    accepted: bool,
    said: str,
) -> None:
    result = crd_installed.kubectl(
        "apply", "--dry-run=server", "-n", kube_namespace, "-f", "-",
        input=_pipeline(source, lifecycle), check=False,
    )  # fmt: skip
    assert (result.returncode == 0) is accepted, result.stderr
    assert said in result.stderr
