"""The bench's Kafka input: the same order events as the files, in a topic of a real broker.

Issue 31: production pipelines read Kafka, not files. ``bench.compare --source kafka`` starts
the KRaft broker the tests use (``tests.support.kafka``, one JVM, its data in the bench's work
folder) and, before any variant runs, produces each batch size's events into a topic of its
own, so that every variant reads the same records and ``availableNow`` ends each run exactly at
the size's last event. A batch is cut by ``maxOffsetsPerTrigger`` (the size's rows per batch)
over ``partitions`` partitions; record ``order_id`` goes to partition ``order_id % partitions``,
so every partition holds the same share and every batch takes the same offsets from each.
The values are the files' JSON lines (``data.json_lines``), byte for byte, and the audit is the
files' audit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from confluent_kafka import Producer

from bench import data

CHUNK = 100_000
"""Events generated and produced at a time (a bounded amount of Python text in memory)."""


class Broker(Protocol):
    """What the bench needs of a broker (``tests.support.kafka.KafkaBroker``)."""

    @property
    def bootstrap_servers(self) -> str: ...

    def create_topic(self, name: str, partitions: int) -> None: ...

    def produce(
        self, topic: str, records: list[tuple[None, str]], partition: int | None = None
    ) -> None: ...

    def end_offsets(self, topic: str) -> dict[int, int]: ...


@dataclass(frozen=True)
class KafkaTopic:
    """Where one size's events are, and how many records a batch takes."""

    bootstrap_servers: str
    topic: str
    max_offsets_per_trigger: int


def topic_name(size: str) -> str:
    """A size's topic: ``medium`` is ``orders-medium``, ``2000x3:1`` ``orders-2000x3-1``."""
    return "orders-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in size)


def produce_events(broker: Broker, topic: str, events: int, partitions: int) -> float:
    """Orders ``0 .. events-1`` into a new ``topic``; seconds it took. Checks every offset.

    One idempotent producer for the whole topic, without a delivery callback per record (the
    tests' client has one, and held production at ~37,000 events/s, 5 minutes for the medium
    size's 12 million); the end offsets checked afterwards say whether every record landed
    exactly once, and the producer's queue must drain.
    """
    started = time.perf_counter()
    broker.create_topic(topic, partitions)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    for first in range(0, events, CHUNK):
        count = min(CHUNK, events - first)
        lines = data.json_lines(first, count).splitlines()
        for partition in range(partitions):
            # order_id % partitions == partition, counted from this chunk's first id.
            offset = (partition - first) % partitions
            for line in lines[offset::partitions]:
                value = line.encode()
                while True:
                    try:
                        producer.produce(topic, value, partition=partition)
                        break
                    except BufferError:
                        producer.poll(0.05)
            producer.poll(0)
    left = producer.flush(300)
    if left:
        raise RuntimeError(f"{topic}: {left} events were never acknowledged by the broker")
    ends = broker.end_offsets(topic)
    expected = {p: len(range(p, events, partitions)) for p in range(partitions)}
    if ends != expected:
        raise RuntimeError(f"{topic}: end offsets {ends}, expected {expected}")
    return time.perf_counter() - started
