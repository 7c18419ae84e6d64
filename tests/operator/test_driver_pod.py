"""The driver pod's access to the API server (review operator-2, N7).

In local mode (``executors.instances: 0``) the driver runs Spark with ``local[N]`` and never
calls the API server: only a driver with executors creates pods. Its ServiceAccount token is
then no use to it, and every container of the pod (sidecars of a pod template included) could
read it and act with the drivers' ServiceAccount (``pods: create`` in the namespace).
"""

from __future__ import annotations

from typing import Any

from eo_jobs.runtime.session import spark_conf
from eo_jobs.spec import parse_pipeline
from eo_jobs.spec.models import Pipeline
from eo_operator.resources import driver_pod

OWNER = {"metadata": {"name": "orders", "uid": "u-1"}}


def _pipeline(**spec: Any) -> Pipeline:
    return parse_pipeline(
        {
            "apiVersion": "eo.dev/v1alpha1",
            "kind": "ExactlyOncePipeline",
            "metadata": {"name": "orders", "namespace": "shop"},
            "spec": {
                "source": {
                    "files": {"path": "s3a://in/orders", "format": "json", "schema": "id BIGINT"}
                },
                "sinks": [
                    {
                        "name": "s",
                        "postgres": {
                            "dsn": {"secretKeyRef": {"name": "db", "key": "dsn"}},
                            "table": "public.t",
                        },
                    }
                ],
                "checkpoint": {"location": "s3a://ckpt/orders"},
                **spec,
            },
        }
    )


def test_a_local_mode_driver_gets_no_service_account_token() -> None:
    pipeline = _pipeline()
    assert pipeline.spec.executors.instances == 0
    assert spark_conf(pipeline.spec, "orders", {})["spark.master"].startswith("local[")
    pod = driver_pod(pipeline, OWNER, 1, "eo-job:test", "eo-driver")
    assert pod["spec"]["automountServiceAccountToken"] is False


def test_a_pod_template_sidecar_does_not_bring_the_token_back() -> None:
    template = {"spec": {"containers": [{"name": "log-shipper", "image": "fluent-bit:3"}]}}
    pipeline = _pipeline(driver={"podTemplate": template})
    pod = driver_pod(pipeline, OWNER, 1, "eo-job:test", "eo-driver")
    assert pod["spec"]["automountServiceAccountToken"] is False


def test_a_driver_with_executors_keeps_its_token_to_create_them() -> None:
    pipeline = _pipeline(executors={"instances": 2})
    assert spark_conf(pipeline.spec, "orders", {})["spark.master"].startswith("k8s://")
    pod = driver_pod(pipeline, OWNER, 1, "eo-job:test", "eo-driver")
    assert pod["spec"].get("automountServiceAccountToken", True) is True
