"""Kafka options that carry credentials come from Secrets by reference, never as literals."""

from __future__ import annotations

from typing import Any

import pytest

from eo_jobs.spec import kafka, parse_pipeline
from eo_jobs.spec.checks import check
from tests.support.pipelines import document
from tests.support.pipelines import problems as _problems

JAAS = "kafka.sasl.jaas.config"
SECRET_REF = {"secretKeyRef": {"name": "orders-kafka", "key": "jaas"}}


def _kafka(**fields: Any) -> dict[str, Any]:
    source = {"bootstrapServers": "b:9092", "topics": ["orders"], "schema": "id BIGINT", **fields}
    return document(source={"kafka": source})


@pytest.mark.parametrize(
    "key",
    [
        JAAS,
        "KAFKA.SASL.JAAS.CONFIG",
        "kafka.ssl.truststore.password",
        "kafka.ssl.keystore.password",
        "kafka.ssl.key.password",
        "kafka.ssl.keystore.key",
        "kafka.sasl.oauthbearer.client.credentials.client.secret",
    ],
)
def test_a_credential_as_a_literal_kafka_option_is_refused_with_the_fix(key: str) -> None:
    message = _problems(_kafka(options={key: "hunter2"}))["spec.source.kafka.options"]
    assert f"key {key} carries a credential" in message
    assert "spec.source.kafka.secretOptions" in message and "secretKeyRef" in message
    assert "hunter2" not in message


def test_kafka_options_without_credentials_are_accepted() -> None:
    options = {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.oauthbearer.token.endpoint.url": "https://idp/token",
        "kafka.ssl.truststore.location": "/etc/kafka/truststore.jks",
    }
    pipeline = parse_pipeline(_kafka(options=options))
    assert pipeline.spec.source.kafka is not None
    assert pipeline.spec.source.kafka.options == options


def test_secret_options_take_a_secret_key_or_an_env_variable() -> None:
    pipeline = parse_pipeline(
        _kafka(
            options={"kafka.security.protocol": "SASL_PLAINTEXT"},
            secretOptions={JAAS: SECRET_REF, "kafka.ssl.key.password": {"env": "KEY_PASSWORD"}},
        )
    )
    source = pipeline.spec.source.kafka
    assert source is not None
    assert kafka.secret_env(source) == {"EO_KAFKA_SASL_JAAS_CONFIG": ("orders-kafka", "jaas")}
    environ = {"EO_KAFKA_SASL_JAAS_CONFIG": "jaas text", "KEY_PASSWORD": "pw"}
    assert kafka.secret_options(source, environ) == {
        JAAS: "jaas text",
        "kafka.ssl.key.password": "pw",
    }


def test_a_secret_option_missing_from_the_environment_names_the_field_and_where() -> None:
    pipeline = parse_pipeline(_kafka(secretOptions={JAAS: SECRET_REF}))
    assert pipeline.spec.source.kafka is not None
    with pytest.raises(kafka.MissingKafkaCredentialError) as caught:
        kafka.secret_options(pipeline.spec.source.kafka, {})
    assert f"spec.source.kafka.secretOptions[{JAAS}]" in str(caught.value)
    assert "EO_KAFKA_SASL_JAAS_CONFIG" in str(caught.value)
    assert "Secret orders-kafka key jaas" in str(caught.value)


@pytest.mark.parametrize(
    "key", ["sasl.jaas.config", "kafka.SASL.jaas.config", "kafka.a_b", "kafka."]
)
def test_a_secret_option_that_is_not_a_kafka_client_setting_is_refused(key: str) -> None:
    message = _problems(_kafka(secretOptions={key: SECRET_REF}))["spec.source.kafka.secretOptions"]
    assert f"key {key}:" in message and "kafka.sasl.jaas.config" in message


def test_a_key_in_both_options_and_secret_options_is_refused() -> None:
    doc = _kafka(options={"kafka.ssl.truststore.type": "PEM"}, secretOptions={})
    doc["spec"]["source"]["kafka"]["secretOptions"] = {"kafka.ssl.truststore.type": SECRET_REF}
    message = _problems(doc)["spec.source.kafka.secretOptions"]
    assert "in both options and secretOptions" in message


def test_env_references_of_secret_options_are_refused_for_kubernetes() -> None:
    doc = _kafka(secretOptions={JAAS: {"env": "JAAS"}})
    found = {p.path: p.message for p in check(parse_pipeline(doc), "kubernetes")}
    assert "on Kubernetes use secretKeyRef" in found[f"spec.source.kafka.secretOptions[{JAAS}].env"]
    assert not [p for p in check(parse_pipeline(doc), "local") if "secretOptions" in p.path]


def test_the_variable_of_an_option_is_one_to_one() -> None:
    assert kafka.env_var_for("kafka.ssl.truststore.password") == "EO_KAFKA_SSL_TRUSTSTORE_PASSWORD"
    assert kafka.env_var_for("kafka.sasl.jaas.config") != kafka.env_var_for("kafka.sasl.jaas")
