"""The process kubelet and Spark's executor pods: the job image's entrypoint, Spark's volumes.

Spark creates executor pods with no command (the image's entrypoint runs) and the argument
``executor``, and mounts its configuration ConfigMap; the process kubelet runs the job image's
entrypoint from this checkout for them, and refuses a missing command for any other image.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import V1Pod

from tests.cluster.podapi import api_env
from tests.cluster.podprocess import base_env
from tests.cluster.podspec import (
    JOB_ENTRYPOINT,
    UnsupportedPodError,
    check_supported,
    image_entrypoint,
)


def _executor_pod(image: str, **spec: Any) -> V1Pod:
    return V1Pod.model_validate(
        {
            "metadata": {"name": "orders-driver-e1-exec-1", "namespace": "ns"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "spark-kubernetes-executor",
                        "image": image,
                        "args": ["executor"],
                        "volumeMounts": [
                            {"name": "spark-conf-volume-exec", "mountPath": "/opt/spark/conf"}
                        ],
                    }
                ],
                "volumes": [
                    {
                        "name": "spark-conf-volume-exec",
                        "configMap": {"name": "spark-exec-1-conf-map"},
                    },
                    {"name": "spark-local-dir-1", "emptyDir": {}},
                ],
                **spec,
            },
        }
    )


@pytest.mark.parametrize(
    "image", ["eo-job:test", "registry.example:5000/team/eo-job:1.2", "eo-job@sha256:" + "a" * 64]
)
def test_the_job_image_runs_its_entrypoint_for_sparks_executor_pods(image: str) -> None:
    check_supported(_executor_pod(image))
    assert image_entrypoint(image) == JOB_ENTRYPOINT


@pytest.mark.parametrize("image", ["busybox", "eo-operator:test", "example/eo-jobs:1"])
def test_any_other_image_without_a_command_is_refused(image: str) -> None:
    with pytest.raises(UnsupportedPodError) as refused:
        check_supported(_executor_pod(image))
    assert refused.value.reason == "NoCommand"
    assert "eo-job" in refused.value.message


def test_pods_reach_the_api_server_as_in_a_cluster_and_spark_home_is_the_images() -> None:
    env = base_env("p", {}, "https://127.0.0.1:6443")
    assert env | api_env("https://127.0.0.1:6443") == env
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert env["KUBERNETES_SERVICE_PORT"] == "6443"
    assert env["SPARK_HOME"].endswith("pyspark")
