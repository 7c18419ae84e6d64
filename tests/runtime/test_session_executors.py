"""The Spark configuration of a driver with executor pods: how executors reach it, what they mount.

Client mode inside the driver pod: executors call the driver back, so its address must be one
they can reach and its ports the ones the driver Service and container declare.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from eo_jobs.runtime.session import (
    BLOCK_MANAGER_PORT,
    DRIVER_PORT,
    EXECUTOR_LABELS,
    UI_PORT,
    spark_conf,
)
from eo_jobs.spec import parse_pipeline
from eo_jobs.spec.models import Pipeline
from eo_operator import resources

REPO = Path(__file__).resolve().parents[2]
POD_ENV = {
    "POD_IP": "10.1.2.3",
    "POD_NAME": "orders-1a2b3c4d-driver-e3",
    "POD_NAMESPACE": "shop",
    "EO_DRIVER_HOST": "orders-1a2b3c4d-driver.shop.svc",
    "EO_JOB_IMAGE": "registry.example/eo-job:1.0",
    "KUBERNETES_SERVICE_HOST": "10.0.0.1",
    "KUBERNETES_SERVICE_PORT": "443",
}


def _pipeline(**driver: object) -> Pipeline:
    doc = yaml.safe_load((REPO / "examples" / "orders-ledger.yaml").read_text())
    doc["spec"]["executors"] = {"instances": 2, "cores": 1, "memory": "512m"}
    doc["spec"]["driver"] = driver  # the example's claim only where a test names one
    return parse_pipeline(doc)


def test_executors_call_the_driver_back_at_its_pod_ip_on_the_service_ports() -> None:
    conf = spark_conf(_pipeline().spec, "app", environ=POD_ENV)

    assert conf["spark.master"] == "k8s://https://10.0.0.1:443"
    assert conf["spark.submit.deployMode"] == "client"
    assert conf["spark.driver.host"] == "10.1.2.3"
    assert conf["spark.driver.bindAddress"] == "0.0.0.0"
    assert conf["spark.driver.port"] == str(DRIVER_PORT)
    assert conf["spark.driver.blockManager.port"] == str(BLOCK_MANAGER_PORT)
    # Executors pick their own block manager port (several may share a host).
    assert "spark.blockManager.port" not in conf
    assert conf["spark.kubernetes.driver.pod.name"] == "orders-1a2b3c4d-driver-e3"
    assert conf["spark.kubernetes.namespace"] == "shop"
    assert conf["spark.kubernetes.container.image"] == "registry.example/eo-job:1.0"


def test_without_a_pod_ip_the_driver_is_reached_through_its_headless_service() -> None:
    environ = {k: v for k, v in POD_ENV.items() if k != "POD_IP"}
    conf = spark_conf(_pipeline().spec, "app", environ=environ)

    assert conf["spark.driver.host"] == "orders-1a2b3c4d-driver.shop.svc"


def test_the_driver_service_and_container_declare_the_ports_spark_listens_on() -> None:
    pipeline = _pipeline()
    obj = {"metadata": {"name": "orders", "uid": "u-1"}}
    service = resources.driver_service(pipeline, obj)
    pod = resources.driver_pod(pipeline, obj, 3, "eo-job:1", "eo-driver")

    service_ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    container_ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    for ports in (service_ports, container_ports):
        assert ports["driver"] == DRIVER_PORT
        assert ports["blockmanager"] == BLOCK_MANAGER_PORT
        assert (
            ports["ui"]
            == UI_PORT
            == int(spark_conf(pipeline.spec, "app", POD_ENV)["spark.ui.port"])
        )


def test_executors_mount_the_drivers_claim_where_the_driver_has_it() -> None:
    conf = spark_conf(
        _pipeline(volumeClaim="orders-data", volumeMountPath="/data").spec, "app", environ=POD_ENV
    )

    prefix = "spark.kubernetes.executor.volumes.persistentVolumeClaim.data"
    assert conf[f"{prefix}.mount.path"] == "/data"
    assert conf[f"{prefix}.options.claimName"] == "orders-data"


def test_no_claim_mounts_nothing_on_executors_and_spark_never_lists_claims() -> None:
    conf = spark_conf(_pipeline().spec, "app", environ=POD_ENV)

    assert not any(key.startswith("spark.kubernetes.executor.volumes.") for key in conf)
    assert conf["spark.kubernetes.driver.ownPersistentVolumeClaim"] == "false"
    assert conf["spark.kubernetes.driver.reusePersistentVolumeClaim"] == "false"


def test_executor_pods_carry_eos_labels_and_stay_out_of_the_operators_driver_watch() -> None:
    conf = spark_conf(_pipeline().spec, "app", environ=POD_ENV)
    prefix = "spark.kubernetes.executor.label."
    labels = {k.removeprefix(prefix): v for k, v in conf.items() if k.startswith(prefix)}

    assert labels == dict(EXECUTOR_LABELS)
    assert labels["app.kubernetes.io/managed-by"] == "eo"
    watched = dict(term.split("=") for term in resources.DRIVER_POD_SELECTOR.split(","))
    assert not watched.items() <= labels.items()
    # Spark refuses labels it reserves for itself; none of eo's is one of them.
    assert not set(labels) & {"spark-app-selector", "spark-role", "spark-exec-id"}
    assert resources.LABEL_PIPELINE not in labels  # it lists a pipeline's driver pods
