"""The test Kafka broker is a real broker: what is produced can be counted and read back."""

from __future__ import annotations

import socket
from collections import Counter
from pathlib import Path

import pytest

from tests.support.kafka import (
    BrokerSetupError,
    KafkaBroker,
    _random_cluster_id,
    broker_jars_dir,
    kafka_version,
)

pytestmark = pytest.mark.kafka


def test_a_thousand_records_spread_over_four_partitions_are_all_counted_and_read_back(
    kafka_broker: KafkaBroker,
) -> None:
    records = [(f"key-{i}", f"value-{i}") for i in range(1000)]
    kafka_broker.create_topic("broker-roundtrip", partitions=4)

    kafka_broker.produce("broker-roundtrip", records)

    end_offsets = kafka_broker.end_offsets("broker-roundtrip")
    assert sorted(end_offsets) == [0, 1, 2, 3]
    assert sum(end_offsets.values()) == 1000
    consumed = kafka_broker.consume_all("broker-roundtrip")
    assert sorted((r.key, r.value) for r in consumed) == sorted(
        (k.encode(), v.encode()) for k, v in records
    )
    assert Counter(r.partition for r in consumed) == {p: n for p, n in end_offsets.items() if n > 0}


def test_records_sent_to_one_partition_land_only_there_in_order(
    kafka_broker: KafkaBroker,
) -> None:
    kafka_broker.create_topic("broker-one-partition", partitions=3)

    kafka_broker.produce(
        "broker-one-partition", [(None, b"a"), (None, b"b"), (b"k", None)], partition=2
    )

    assert kafka_broker.end_offsets("broker-one-partition") == {0: 0, 1: 0, 2: 3}
    consumed = kafka_broker.consume_all("broker-one-partition")
    assert [(r.partition, r.offset, r.key, r.value) for r in consumed] == [
        (2, 0, None, b"a"),
        (2, 1, None, b"b"),
        (2, 2, b"k", None),
    ]


def test_a_stopped_broker_no_longer_accepts_connections(tmp_path: Path) -> None:
    broker = KafkaBroker(tmp_path, broker_jars_dir())
    with broker:
        socket.create_connection(("127.0.0.1", broker.port), timeout=2).close()

    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", broker.port), timeout=2).close()


def test_missing_broker_jars_name_the_script_that_fetches_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EO_CACHE", str(tmp_path))

    with pytest.raises(BrokerSetupError) as error:
        broker_jars_dir()

    assert f"kafka-broker-{kafka_version()}" in str(error.value)
    assert "scripts/fetch-jars.sh" in str(error.value)


def test_a_cluster_id_never_starts_with_a_dash_the_storage_tool_would_read_as_an_option() -> None:
    # 0xf8 in the first byte encodes to "-" in URL-safe base64: the first draw must be refused.
    draws = iter([bytes([0xF8]) + bytes(15), bytes(16)])

    cluster_id = _random_cluster_id(lambda: next(draws))

    assert cluster_id == "AAAAAAAAAAAAAAAAAAAAAA"
    assert len(cluster_id) == 22
