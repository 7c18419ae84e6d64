"""`eo run` from a SASL/PLAIN-protected Kafka broker (KRaft, from the Maven jars) with the JAAS
configuration, and so the password, only in the driver's environment: where the operator puts a
`secretOptions` Secret key, or where an `env` reference points for a local run."""

from __future__ import annotations

import json
import re
import secrets
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.runtime import harness
from tests.support.kafka import KafkaBroker, broker_jars_dir

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

USER = "orders"
PASSWORD = f"pw-{secrets.token_hex(8)}"
JAAS_ENV = "EO_KAFKA_SASL_JAAS_CONFIG"
"""Where the operator puts secretOptions' kafka.sasl.jaas.config (spec.kafka.env_var_for)."""


def _jaas(password: str) -> str:
    return (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{USER}" password="{password}";'
    )


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A broker whose second listener only lets user `orders` in, with PASSWORD."""
    workdir = tmp_path_factory.mktemp("kafka-sasl")
    with KafkaBroker(workdir, broker_jars_dir(), sasl_users={USER: PASSWORD}) as broker:
        yield broker


def _pipeline(work: Path, broker: KafkaBroker, topic: str, jaas_ref: str) -> Path:
    spec = work / "pipeline.yaml"
    spec.write_text(f"""apiVersion: eo.dev/v1alpha1
kind: ExactlyOncePipeline
metadata: {{name: orders, namespace: test}}
spec:
  source:
    kafka:
      bootstrapServers: "{broker.sasl_bootstrap_servers}"
      topics: [{topic}]
      schema: "order_id BIGINT, merchant STRING, amount_cents BIGINT"
      options:
        kafka.security.protocol: SASL_PLAINTEXT
        kafka.sasl.mechanism: PLAIN
      secretOptions:
        kafka.sasl.jaas.config: {jaas_ref}
  sinks:
    - name: orders
      postgres: {{dsn: {{env: TEST_DSN}}, table: public.orders, writerPartitions: 2}}
  checkpoint: {{location: "{work / "checkpoint"}", triggerIntervalSeconds: 0}}
  driver: {{cores: 2, memory: 768m}}
""")
    assert PASSWORD not in spec.read_text()
    return spec


def _produce(broker: KafkaBroker, topic: str, count: int) -> harness.Truth:
    truth = harness.Truth()
    records = []
    for order_id in range(count):
        truth.valid[order_id] = order_id * 7
        value = {"order_id": order_id, "merchant": "m", "amount_cents": order_id * 7}
        records.append((str(order_id), json.dumps(value)))
    broker.produce(topic, records)
    return truth


def test_a_pipeline_reads_a_sasl_broker_with_the_password_only_in_a_secret_variable(
    sasl_broker: KafkaBroker, pg_dsn: str, tmp_path: Path
) -> None:
    harness.create_table(pg_dsn)
    topic = f"orders-{secrets.token_hex(3)}"
    sasl_broker.create_topic(topic, 2)
    truth = _produce(sasl_broker, topic, 300)
    ref = "{secretKeyRef: {name: orders-kafka, key: jaas}}"
    spec = _pipeline(tmp_path, sasl_broker, topic, ref)

    code, out = harness.run(spec, 1, pg_dsn, extra_env={JAAS_ENV: _jaas(PASSWORD)})

    assert code == 0, out
    harness.assert_exact(pg_dsn, truth)
    assert PASSWORD not in out


def test_a_wrong_password_from_an_env_reference_fails_with_kafkas_authentication_error(
    sasl_broker: KafkaBroker, pg_dsn: str, tmp_path: Path
) -> None:
    harness.create_table(pg_dsn)
    topic = f"orders-{secrets.token_hex(3)}"
    sasl_broker.create_topic(topic, 1)
    _produce(sasl_broker, topic, 10)
    spec = _pipeline(tmp_path, sasl_broker, topic, "{env: ORDERS_KAFKA_JAAS}")
    wrong = f"wrong-{secrets.token_hex(4)}"

    code, out = harness.run(spec, 1, pg_dsn, extra_env={"ORDERS_KAFKA_JAAS": _jaas(wrong)})

    assert code != 0, out
    assert "Authentication failed" in out, out[-3000:]
    assert wrong not in out


def test_a_secret_option_missing_from_the_environment_stops_the_driver_naming_it(
    sasl_broker: KafkaBroker, pg_dsn: str, tmp_path: Path
) -> None:
    harness.create_table(pg_dsn)
    ref = "{secretKeyRef: {name: orders-kafka, key: jaas}}"
    spec = _pipeline(tmp_path, sasl_broker, "orders-none", ref)

    code, out = harness.run(spec, 1, pg_dsn)

    assert code == 2, out
    assert "spec.source.kafka.secretOptions[kafka.sasl.jaas.config]" in out
    assert "EO_KAFKA_SASL_JAAS_CONFIG" in out and "Secret orders-kafka key jaas" in out


def test_the_spark_ui_of_a_sasl_pipeline_never_shows_the_password(
    sasl_broker: KafkaBroker, pg_dsn: str, tmp_path: Path
) -> None:
    harness.create_table(pg_dsn)
    topic = f"orders-{secrets.token_hex(3)}"
    sasl_broker.create_topic(topic, 1)
    _produce(sasl_broker, topic, 50)
    ref = "{secretKeyRef: {name: orders-kafka, key: jaas}}"
    spec = _pipeline(tmp_path, sasl_broker, topic, ref)
    env = {JAAS_ENV: _jaas(PASSWORD)}
    driver = harness.Driver(spec, 1, pg_dsn, extra_env=env, available_now=False)
    try:
        deadline = time.monotonic() + 240
        while driver.batches_done() < 1:
            assert driver.proc.poll() is None and time.monotonic() < deadline, driver.output()
            time.sleep(0.5)
        found = re.search(r"Spark UI at (http://\S+)", driver.output())
        assert found, driver.output()
        url = found.group(1)
        with urllib.request.urlopen(f"{url}/api/v1/applications", timeout=10) as response:
            app = json.loads(response.read())[0]["id"]
        pages = [
            "/jobs/",
            "/stages/",
            "/environment/",
            "/SQL/",
            "/StreamingQuery/",
            f"/api/v1/applications/{app}/environment",
            f"/api/v1/applications/{app}/sql?details=true&planDescription=true",
            f"/api/v1/applications/{app}/stages?details=true",
        ]
        for page in pages:
            with urllib.request.urlopen(f"{url}{page}", timeout=10) as response:
                body = response.read().decode(errors="replace")
            assert PASSWORD not in body, page
        assert PASSWORD not in driver.output()
    finally:
        driver.kill(signal.SIGTERM)
        driver.wait(120)
