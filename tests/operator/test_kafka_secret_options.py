"""The operator passes Kafka secret options to the driver as Secret-backed variables only."""

from __future__ import annotations

from typing import Any

from eo_jobs.spec import parse_pipeline
from eo_operator.reconciler import parse
from eo_operator.resources import driver_pod, spec_configmap

OWNER = {"metadata": {"name": "orders", "uid": "u-1"}}
JAAS_REF = {"secretKeyRef": {"name": "orders-kafka", "key": "jaas"}}


def _doc(secret_options: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "eo.dev/v1alpha1",
        "kind": "ExactlyOncePipeline",
        "metadata": {"name": "orders", "namespace": "pay", "uid": "u-1"},
        "spec": {
            "source": {
                "kafka": {
                    "bootstrapServers": "kafka:9093",
                    "topics": ["orders"],
                    "schema": "id BIGINT",
                    "options": {
                        "kafka.security.protocol": "SASL_SSL",
                        "kafka.sasl.mechanism": "PLAIN",
                    },
                    "secretOptions": secret_options,
                }
            },
            "sinks": [
                {
                    "name": "ledger",
                    "postgres": {
                        "dsn": {"secretKeyRef": {"name": "db", "key": "dsn"}},
                        "table": "public.t",
                    },
                }
            ],
            "checkpoint": {"location": "/data/ckpt"},
        },
    }


def test_a_secret_option_reaches_the_driver_as_a_secret_key_reference() -> None:
    pipeline = parse_pipeline(
        _doc(
            {
                "kafka.sasl.jaas.config": JAAS_REF,
                "kafka.ssl.truststore.password": {
                    "secretKeyRef": {"name": "orders-tls", "key": "truststore-password"}
                },
            }
        )
    )
    pod = driver_pod(pipeline, OWNER, 3, "eo-job:test", None)
    env = {item["name"]: item for item in pod["spec"]["containers"][0]["env"]}

    assert env["EO_KAFKA_SASL_JAAS_CONFIG"] == {
        "name": "EO_KAFKA_SASL_JAAS_CONFIG",
        "valueFrom": JAAS_REF,
    }
    assert env["EO_KAFKA_SSL_TRUSTSTORE_PASSWORD"]["valueFrom"] == {
        "secretKeyRef": {"name": "orders-tls", "key": "truststore-password"}
    }
    # The spec ConfigMap carries the reference (the driver needs to know the option exists),
    # never a value: there is none in the spec to copy.
    config = spec_configmap(pipeline, OWNER)["data"]["pipeline.yaml"]
    assert "orders-kafka" in config and "secretKeyRef" in config


def test_the_operator_refuses_an_env_reference_of_a_secret_option() -> None:
    pipeline, reason = parse(_doc({"kafka.sasl.jaas.config": {"env": "JAAS"}}))
    assert pipeline is None
    assert reason is not None
    assert reason.startswith("spec.source.kafka.secretOptions[kafka.sasl.jaas.config]: on Kubern")
    assert "secretKeyRef" in reason


def test_the_operator_refuses_a_literal_jaas_option_naming_the_field() -> None:
    doc = _doc({})
    doc["spec"]["source"]["kafka"]["options"]["kafka.sasl.jaas.config"] = "... password=x;"
    pipeline, reason = parse(doc)
    assert pipeline is None
    assert reason is not None
    assert "spec.source.kafka.options" in reason and "secretOptions" in reason
    assert "password=x" not in reason
