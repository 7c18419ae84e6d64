"""restartPolicy.progressTimeoutSeconds on a real kube-apiserver: the CEL floor (the slow-batch
threshold + the trigger interval + 30 s, with the defaults when alerts or the interval are left
out) accepts 0 and the floor, and refuses below it naming the field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.cluster.plugin import KubeCluster

FIELD = "spec.restartPolicy.progressTimeoutSeconds"


def _pipeline(timeout: int, **spec: Any) -> str:
    return json.dumps(
        {
            "apiVersion": "eo.dev/v1alpha1",
            "kind": "ExactlyOncePipeline",
            "metadata": {"name": "progress-timeout"},
            "spec": {
                "source": {"files": {"path": "/in", "format": "json", "schema": "id BIGINT"}},
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
                "restartPolicy": {"progressTimeoutSeconds": timeout},
                **spec,
            },
        }
    )


@pytest.mark.parametrize(
    ("timeout", "spec", "accepted"),
    [
        (0, {}, True),
        (340, {}, True),  # 300 (default threshold) + 10 (default interval) + 30
        (339, {}, False),
        (91, {"alerts": {"maxCheckpointDurationSeconds": 1},
              "checkpoint": {"location": "/c", "triggerIntervalSeconds": 60}}, True),
        (90, {"alerts": {"maxCheckpointDurationSeconds": 1},
              "checkpoint": {"location": "/c", "triggerIntervalSeconds": 60}}, False),
    ],
)  # fmt: skip
def test_the_api_server_applies_the_floor(
    crd_installed: KubeCluster,
    kube_namespace: str,
    timeout: int,
    spec: dict[str, Any],
    accepted: bool,
) -> None:
    result = crd_installed.kubectl(
        "apply", "--dry-run=server", "-n", kube_namespace, "-f", "-",
        input=_pipeline(timeout, **spec), check=False,
    )  # fmt: skip
    assert (result.returncode == 0) is accepted, result.stderr
    if not accepted:
        assert FIELD in result.stderr and "at least" in result.stderr, result.stderr
