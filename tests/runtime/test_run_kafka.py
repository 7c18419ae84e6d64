"""`eo run` from a real Kafka broker (KRaft, started from the Maven jars): killed mid-stream,
replayed from the checkpointed offsets, every message lands exactly once."""

from __future__ import annotations

import json
import random
import secrets
import signal
import time
from pathlib import Path

import pytest
from tests.runtime import harness
from tests.support.kafka import KafkaBroker

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def _produce(broker: KafkaBroker, topic: str, truth: harness.Truth, start: int, count: int) -> None:
    records: list[tuple[str, str]] = []
    for order_id in range(start, start + count):
        amount = (order_id * 37) % 10_000
        truth.valid[order_id] = amount
        records.append(
            (
                str(order_id),
                json.dumps(
                    {"order_id": order_id, "merchant": f"m{order_id % 5}", "amount_cents": amount}
                ),
            )
        )
        if order_id % 97 == 0:
            records.append((f"bad-{order_id}", '{"order_id": "x", "merchant": '))
            truth.malformed += 1
    broker.produce(topic, records)


def _pipeline(work: Path, broker: KafkaBroker, topic: str) -> Path:
    spec = work / "pipeline.yaml"
    spec.write_text(f"""apiVersion: eo.dev/v1alpha1
kind: ExactlyOncePipeline
metadata: {{name: orders, namespace: test}}
spec:
  source:
    kafka:
      bootstrapServers: "{broker.bootstrap_servers}"
      topics: [{topic}]
      startingOffsets: earliest
      maxOffsetsPerTrigger: 250
      schema: "order_id BIGINT, merchant STRING, amount_cents BIGINT"
  sinks:
    - name: orders
      postgres: {{dsn: {{env: TEST_DSN}}, table: public.orders, writerPartitions: 2}}
  checkpoint: {{location: "{work / "checkpoint"}", triggerIntervalSeconds: 0}}
  driver: {{cores: 2, memory: 768m}}
""")
    return spec


def _first_run_killed_at(
    broker: KafkaBroker, dsn: str, work: Path, messages: int, point: str
) -> tuple[str, harness.Truth, Path]:
    """Table, a 3-partition topic with ``messages`` orders, the pipeline, and its first driver
    (epoch 1) killed at crash point ``point`` of batch 1: (topic, truth, pipeline file)."""
    harness.create_table(dsn)
    topic = f"orders-{secrets.token_hex(3)}"
    broker.create_topic(topic, 3)
    truth = harness.Truth()
    _produce(broker, topic, truth, 0, messages)
    spec = _pipeline(work, broker, topic)
    fault = {"EO_FAULT_POINT": point, "EO_FAULT_BATCH": "1"}
    code, out = harness.run(spec, 1, dsn, extra_env=fault)
    assert code == -signal.SIGKILL, out
    return topic, truth, spec


def test_a_kafka_stream_killed_twice_mid_stream_lands_exactly_once(
    kafka_broker: KafkaBroker, pg_dsn: str, tmp_path: Path
) -> None:
    topic, truth, spec = _first_run_killed_at(
        kafka_broker, pg_dsn, tmp_path, 1200, "after-some-commits"
    )
    _produce(kafka_broker, topic, truth, 10_000, 800)
    driver = harness.Driver(spec, 2, pg_dsn)
    deadline = time.monotonic() + 300
    target = random.Random(time.time_ns()).randint(1, 3)
    while driver.batches_done() < target:
        assert driver.proc.poll() is None, driver.output()  # it must not die by itself
        assert time.monotonic() < deadline, driver.output()
        time.sleep(0.05)
    driver.kill()
    assert driver.wait() == -signal.SIGKILL, driver.output()

    _produce(kafka_broker, topic, truth, 20_000, 300)
    code, out = harness.run(spec, 3, pg_dsn)
    assert code == 0, out
    assert sum(kafka_broker.end_offsets(topic).values()) == len(truth.valid) + truth.malformed
    harness.assert_exact(pg_dsn, truth)


def test_a_kafka_batch_decided_before_a_crash_is_replayed_and_the_stream_runs_on(
    kafka_broker: KafkaBroker, pg_dsn: str, tmp_path: Path
) -> None:
    """The driver dies after batch 1's decision, before Spark's commit log: the next driver
    replays batch 1 from its logged offsets without asking Kafka for the latest ones first.
    Spark 4.1.1's Kafka source then failed the query when it reported progress
    (SPARK-55271: ``metrics`` on offsets it had not fetched yet), once per such recovery."""
    _, truth, spec = _first_run_killed_at(kafka_broker, pg_dsn, tmp_path, 900, "after-decision")
    code, out = harness.run(spec, 2, pg_dsn)
    assert code == 0, out
    events = [json.loads(line) for line in out.splitlines() if line.startswith('{"event"')]
    assert [e["batch"] for e in events if e["event"] == "replay"] == [1]
    harness.assert_exact(pg_dsn, truth)
