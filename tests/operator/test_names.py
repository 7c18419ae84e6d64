"""Names the operator derives from a pipeline's name are safe: no two pipelines share an object,
every name fits its Kubernetes limit, label values fit theirs, and the CRD (the real API server)
and the models refuse pipeline names the operator could not serve."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from eo_jobs.spec import SpecError, parse_pipeline
from eo_jobs.spec.models import Pipeline
from eo_operator.resources import driver_pod, driver_service, spec_configmap
from tests.cluster.plugin import KubeCluster

DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
SPARK_EXECUTOR_PREFIX = 47
"""Spark takes the driver pod's name as its executor pod name prefix, limited to 63 - 16."""


def _doc(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "eo.dev/v1alpha1",
        "kind": "ExactlyOncePipeline",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "source": {"files": {"path": "/in", "format": "json", "schema": "id BIGINT"}},
            "sinks": [
                {
                    "name": "s",
                    "postgres": {
                        "dsn": {"secretKeyRef": {"name": "db", "key": "dsn"}},
                        "table": "public.t",
                    },
                }
            ],
            "checkpoint": {"location": "/ckpt"},
        },
    }


def _objects(name: str) -> dict[str, dict[str, Any]]:
    """Every object the operator creates for a pipeline, as the reconciler builds them."""
    pipeline: Pipeline = parse_pipeline(_doc(name))
    owner = {"metadata": {"name": name, "uid": "u-1"}}
    return {
        "Pod": driver_pod(pipeline, owner, 12345, "eo-job:test", None),
        "Service": driver_service(pipeline, owner),
        "ConfigMap": spec_configmap(pipeline, owner),
    }


def test_a_dotted_name_and_its_dashed_twin_get_distinct_objects() -> None:
    dotted, dashed = _objects("orders.v1"), _objects("orders-v1")
    for kind in ("Pod", "Service", "ConfigMap"):
        assert dotted[kind]["metadata"]["name"] != dashed[kind]["metadata"]["name"], kind


def test_long_names_sharing_a_prefix_get_distinct_objects_within_the_limits() -> None:
    first, second = "a" * 62 + "1", "a" * 62 + "2"
    one, two = _objects(first), _objects(second)
    for kind in ("Pod", "Service", "ConfigMap"):
        assert one[kind]["metadata"]["name"] != two[kind]["metadata"]["name"], kind
    for objects in (one, two):
        pod = objects["Pod"]["metadata"]["name"]
        assert DNS_1123_LABEL.match(pod) and len(pod) <= SPARK_EXECUTOR_PREFIX, pod
        service = objects["Service"]["metadata"]["name"]
        assert DNS_1035_LABEL.match(service) and len(service) <= 63, service
        configmap = objects["ConfigMap"]["metadata"]["name"]
        assert DNS_1123_LABEL.match(configmap) and len(configmap) <= 63, configmap


@pytest.mark.parametrize("name", ["1orders", "orders.v1", "9.9", "a" * 63, "x"])
def test_every_derived_name_and_label_value_is_valid_kubernetes(name: str) -> None:
    objects = _objects(name)
    service = objects["Service"]["metadata"]["name"]
    assert DNS_1035_LABEL.match(service) and len(service) <= 63, service
    pod = objects["Pod"]["metadata"]["name"]
    assert DNS_1123_LABEL.match(pod) and len(pod) <= SPARK_EXECUTOR_PREFIX, pod
    host = next(e["value"] for e in objects["Pod"]["spec"]["containers"][0]["env"]
                if e["name"] == "EO_DRIVER_HOST")  # fmt: skip
    assert host.startswith(f"{service}.")
    for obj in objects.values():
        for value in obj["metadata"]["labels"].values():
            assert len(value) <= 63 and LABEL_VALUE.match(value), value
    for value in objects["Service"]["spec"]["selector"].values():
        assert len(value) <= 63 and LABEL_VALUE.match(value), value


def test_derived_names_are_stable_for_one_pipeline() -> None:
    assert _objects("orders") == _objects("orders")


def test_a_name_longer_than_a_label_value_is_refused_by_the_models() -> None:
    with pytest.raises(SpecError) as refused:
        parse_pipeline(_doc("a" * 64))
    assert "metadata.name" in str(refused.value) or "name" in str(refused.value)


@pytest.mark.slow
def test_the_api_server_refuses_a_pipeline_name_the_operator_cannot_serve(
    crd_installed: KubeCluster, kube_namespace: str
) -> None:
    doc = _doc("a" * 64)
    doc["metadata"]["namespace"] = kube_namespace
    refused = crd_installed.kubectl("apply", "-f", "-", input=json.dumps(doc), check=False)
    assert refused.returncode != 0 and "63" in refused.stderr, refused.stderr
    doc["metadata"]["name"] = "a" * 63
    crd_installed.kubectl("apply", "-f", "-", input=json.dumps(doc))


def test_s3_checkpoint_keys_reach_the_driver_only_as_secret_references() -> None:
    doc = _doc("orders")
    doc["spec"]["checkpoint"] = {
        "location": "s3a://ckpt/orders",
        "s3": {
            "accessKeyId": {"secretKeyRef": {"name": "store", "key": "id"}},
            "secretAccessKey": {"secretKeyRef": {"name": "store", "key": "secret"}},
        },
    }
    pod = driver_pod(parse_pipeline(doc), {"metadata": {"name": "o", "uid": "u"}}, 1, "i", None)
    env = {item["name"]: item for item in pod["spec"]["containers"][0]["env"]}

    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"] == {"secretKeyRef": {"name": "store", "key": "id"}}
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"] == {
        "secretKeyRef": {"name": "store", "key": "secret"}
    }
    assert "value" not in env["AWS_ACCESS_KEY_ID"]
