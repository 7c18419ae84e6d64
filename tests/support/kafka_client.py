"""Kafka client helpers for test assertions: create topics, produce, read offsets and records.

They use librdkafka (confluent-kafka), a client independent of Spark's Java one, so what a
test asserts about a topic is not seen through the code under test.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewPartitions, NewTopic

Payload = bytes | str | None
"""A record key or value as given to `produce` (str is sent UTF-8 encoded)."""

ANY_PARTITION = -1
"""librdkafka's "unassigned" partition: the default partitioner places the record by key."""


@dataclass(frozen=True)
class ConsumedRecord:
    """One record read back from a topic, with where it was stored."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def create_topic(bootstrap: str, name: str, partitions: int, timeout: float = 30.0) -> None:
    """Create a topic and wait until every partition has a leader, so producing works."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions)])
    futures[name].result(timeout=timeout)
    _await_leaders(admin, name, partitions, timeout)


def add_partitions(bootstrap: str, name: str, partitions: int, timeout: float = 30.0) -> None:
    """Grow a topic to ``partitions`` partitions and wait until each has a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_partitions([NewPartitions(name, partitions)])
    futures[name].result(timeout=timeout)
    _await_leaders(admin, name, partitions, timeout)


def _await_leaders(admin: AdminClient, name: str, partitions: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        topic = admin.list_topics(topic=name, timeout=timeout).topics.get(name)
        if (
            topic is not None
            and topic.error is None
            and len(topic.partitions) == partitions
            and all(p.leader >= 0 for p in topic.partitions.values())
        ):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {name} has no leader for every partition yet")
        time.sleep(0.1)


def produce(
    bootstrap: str,
    topic: str,
    records: Sequence[tuple[Payload, Payload]],
    partition: int | None = None,
    timeout: float = 60.0,
) -> None:
    """Write `records` (key, value) and wait until every one is acknowledged by the broker.

    With `partition=None` the default partitioner places each record by its key.
    """
    errors: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            errors.append(error)

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )
    target = ANY_PARTITION if partition is None else partition
    for key, value in records:
        while True:
            try:
                producer.produce(
                    topic,
                    key=_encode(key),
                    value=_encode(value),
                    partition=target,
                    on_delivery=delivered,
                )
                break
            except BufferError:
                producer.poll(0.1)
    undelivered = producer.flush(timeout)
    if undelivered or errors:
        raise KafkaException(
            f"{undelivered} records not acknowledged, {len(errors)} failed: {errors[:3]}"
        )


def end_offsets(bootstrap: str, topic: str, timeout: float = 10.0) -> dict[int, int]:
    """The high watermark (next offset to be written) of every partition of `topic`."""
    consumer = _consumer(bootstrap)
    try:
        return {
            partition: consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout
            )[1]
            for partition in _partitions(consumer, topic, timeout)
        }
    finally:
        consumer.close()


def consume_all(bootstrap: str, topic: str, timeout: float = 60.0) -> list[ConsumedRecord]:
    """Every committed record of `topic`, in partition then offset order.

    Reads with isolation level read_committed, so aborted transactional writes and
    transaction markers are not returned, as a downstream reader would see the topic.
    """
    consumer = _consumer(bootstrap, {"enable.partition.eof": True})
    try:
        partitions = _partitions(consumer, topic, timeout)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        pending = set(partitions)
        records: list[ConsumedRecord] = []
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"partitions {sorted(pending)} of {topic} not read to end")
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    pending.discard(_int(message.partition()))
                    continue
                raise KafkaException(error)
            records.append(
                ConsumedRecord(
                    partition=_int(message.partition()),
                    offset=_int(message.offset()),
                    key=_bytes(message.key()),
                    value=_bytes(message.value()),
                )
            )
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def _consumer(bootstrap: str, extra: dict[str, str | int | bool] | None = None) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"eo-test-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            **(extra or {}),
        }
    )


def _partitions(consumer: Consumer, topic: str, timeout: float) -> list[int]:
    metadata = consumer.list_topics(topic=topic, timeout=timeout).topics[topic]
    if metadata.error is not None:
        raise KafkaException(metadata.error)
    return sorted(metadata.partitions)


def _encode(payload: Payload) -> bytes | None:
    return payload.encode("utf-8") if isinstance(payload, str) else payload


def _int(value: int | None) -> int:
    if value is None:
        raise KafkaException("record without partition or offset")
    return value


def _bytes(value: bytes | str | None) -> bytes | None:
    return value.encode("utf-8") if isinstance(value, str) else value
