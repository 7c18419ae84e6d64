"""Spark reads a real Kafka broker through the connector jars that fetch-jars.sh resolved."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession
from tests.support.kafka import KafkaBroker
from tests.support.spark import kafka_session

from eo_jobs.runtime.packages import kafka_connector_jars

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with kafka_session("eo-kafka-connector-test") as session:
        yield session


def test_a_batch_read_of_a_topic_returns_exactly_the_produced_records_per_partition(
    spark: SparkSession, kafka_broker: KafkaBroker
) -> None:
    kafka_broker.create_topic("connector-batch", partitions=4)
    kafka_broker.produce("connector-batch", [(f"k{i}", f"v{i}") for i in range(1000)])

    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka_broker.bootstrap_servers)
        .option("subscribe", "connector-batch")
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    rows = frame.select("partition", "value").collect()

    expected = {p: n for p, n in kafka_broker.end_offsets("connector-batch").items() if n > 0}
    assert Counter(row["partition"] for row in rows) == expected
    assert len(rows) == 1000
    assert sorted(row["value"].decode() for row in rows) == sorted(f"v{i}" for i in range(1000))


def _artifact(jar: Path) -> str:
    """The artifact name of a jar file: its name without the version and `.jar`."""
    return re.sub(r"-\d+\.\d+[^/]*\.jar$", "", jar.name)


def test_the_fetched_connector_set_holds_no_library_that_pyspark_already_ships() -> None:
    shipped = {_artifact(jar) for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    fetched = {_artifact(jar) for jar in kafka_connector_jars()}

    assert "spark-sql-kafka-0-10_2.13" in fetched
    assert "kafka-clients" in fetched
    assert fetched & shipped == set()
