"""An exactly-once Kafka stream parses with FAILFAST; a batch with a record that does not parse
fails, and is read again by the offsets its checkpoint logged, every record once.

A real KRaft broker and a real local Spark with the Kafka connector: the stream is eo's own
(``read_source``), the checkpoint Spark's, and each batch's records are compared with what was
produced, the malformed ones with their text (``runtime.reread``).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import DataFrame, SparkSession
from tests.support.kafka import KafkaBroker
from tests.support.pipelines import document
from tests.support.spark import kafka_session

from eo_jobs.runtime.checkpoint import CheckpointLog, _read_local
from eo_jobs.runtime.reread import Reread, is_malformed
from eo_jobs.runtime.source import ERROR, RAW, read_source
from eo_jobs.spec import parse_pipeline
from eo_jobs.spec.models import PipelineSpec

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

SCHEMA = "id BIGINT, note STRING"
BAD = '{"id": "not a number", "note": '


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with kafka_session("eo-reread-kafka-test") as session:
        yield session


def _spec(
    broker: KafkaBroker,
    topic: str,
    guarantee: str = "exactly-once",
    options: dict[str, str] | None = None,
) -> PipelineSpec:
    source = {
        "kafka": {
            "bootstrapServers": broker.bootstrap_servers,
            "topics": [topic],
            "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": 40,
            "schema": SCHEMA,
            "options": options or {},
        }
    }
    return parse_pipeline(document(source=source, guarantee=guarantee)).spec


def _good(i: int) -> str:
    return json.dumps({"id": i, "note": f"n{i}"})


class Batches:
    """What each batch gave: the stream's rows, or, when the stream failed on a malformed
    record, the rows read again by the batch's offsets (and which batches those were)."""

    def __init__(self, spark: SparkSession, spec: PipelineSpec, checkpoint: Path) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.reread: list[int] = []
        self.extents: list[dict[str, int]] = []
        self.log = CheckpointLog(str(checkpoint), _read_local)
        again = Reread.of(spark, spec, self.log)
        assert again is not None
        self.again = again

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        columns = ["id", "note", RAW, ERROR]
        try:
            got = [tuple(r) for r in df.select(*columns).collect()]
        except Exception as exc:
            if not is_malformed(exc):
                raise
            self.reread.append(batch_id)
            self.extents.append(self.again.extent(batch_id))
            got = [tuple(r) for r in self.again.frame(batch_id).select(*columns).collect()]
        self.rows.extend(got)


def _run(spark: SparkSession, spec: PipelineSpec, checkpoint: Path, batches: Batches) -> None:
    query = (
        read_source(spark, spec)
        .writeStream.foreachBatch(batches)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None


def test_a_batch_with_a_malformed_record_is_read_again_by_its_offsets_every_record_once(
    spark: SparkSession, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    topic = f"reread-{secrets.token_hex(3)}"
    kafka_broker.create_topic(topic, 2)
    kafka_broker.produce(topic, [("x", BAD)], partition=0)  # offset 0: in the first batch
    kafka_broker.produce(topic, [(str(i), _good(i)) for i in range(50)], partition=0)
    kafka_broker.produce(topic, [(str(i), _good(i)) for i in range(50, 100)], partition=1)
    kafka_broker.produce(topic, [("t", None)], partition=1)  # a tombstone: no value at all
    # Where the stream starts, by time: Spark would prefer it over a re-read's own offsets.
    spec = _spec(kafka_broker, topic, options={"startingTimestamp": "0"})
    checkpoint = tmp_path / "ckpt"
    batches = Batches(spark, spec, checkpoint)
    _run(spark, spec, checkpoint, batches)

    # The topic grows a partition between two runs of the query: the batch that first reads
    # it starts it at its earliest offset, which no earlier batch logged.
    kafka_broker.add_partitions(topic, 3)
    kafka_broker.produce(topic, [(str(i), _good(i)) for i in range(100, 130)], partition=2)
    kafka_broker.produce(topic, [("y", BAD + "2")], partition=2)
    _run(spark, spec, checkpoint, batches)

    good = sorted((r[0], r[1]) for r in batches.rows if r[3] is None)
    assert good == [(i, f"n{i}") for i in range(130)]
    dead = sorted(r[2] or "" for r in batches.rows if r[3] is not None)
    assert dead == ["", BAD, BAD + "2"]  # the tombstone has no text
    # Batch 0 holds the first malformed record: read again from the initial offsets
    # Spark logged in sources/0/0; the last batch from the offsets before it, the new
    # partition from its earliest offset.
    assert batches.reread[0] == 0
    assert len(batches.reread) == 2
    last = batches.reread[-1]
    start, end = batches.log.kafka_range(last)
    assert start[topic]["2"] == -2 and end[topic]["2"] == 31
    assert batches.extents[-1]["partitions"] == 3


def test_the_start_of_the_first_batch_is_spark_s_initial_offsets_and_later_ones_the_last_end(
    spark: SparkSession, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    topic = f"ranges-{secrets.token_hex(3)}"
    kafka_broker.create_topic(topic, 2)
    kafka_broker.produce(topic, [(str(i), _good(i)) for i in range(60)], partition=0)
    kafka_broker.produce(topic, [(str(i), _good(i)) for i in range(60, 90)], partition=1)
    spec = _spec(kafka_broker, topic)
    checkpoint = tmp_path / "ckpt"
    batches = Batches(spark, spec, checkpoint)
    _run(spark, spec, checkpoint, batches)

    log = batches.log
    first_start = log.kafka_range(0)[0]
    assert first_start == {topic: {"0": 0, "1": 0}}
    total = 0
    batch = 0
    while log.offsets(batch) is not None:
        start, end = log.kafka_range(batch)
        if batch > 0:
            assert start == log.kafka_range(batch - 1)[1]
        total += sum(end[topic][p] - start[topic][p] for p in end[topic])
        batch += 1
    assert total == 90
    assert batches.reread == []
    assert len(batches.rows) == 90


def test_only_an_exactly_once_kafka_pipeline_is_read_again(
    spark: SparkSession, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    """Without two-phase commit a failed pass cannot be undone: such a pipeline's stream keeps
    the corrupt-record column (its malformed records arrive with their text), never fails."""
    log = CheckpointLog(str(tmp_path / "ckpt"), _read_local)
    assert Reread.of(spark, _spec(kafka_broker, "t"), log) is not None
    assert Reread.of(spark, _spec(kafka_broker, "t", "at-least-once"), log) is None

    topic = f"alo-{secrets.token_hex(3)}"
    kafka_broker.create_topic(topic, 1)
    kafka_broker.produce(topic, [("1", _good(1)), ("x", BAD), ("2", _good(2))])
    spec = _spec(kafka_broker, topic, "at-least-once")
    rows = []

    def each(df: DataFrame, _batch_id: int) -> None:
        rows.extend(tuple(r) for r in df.select("id", RAW, ERROR).collect())

    query = (
        read_source(spark, spec)
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", str(tmp_path / "alo"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    assert sorted(r[0] for r in rows if r[2] is None) == [1, 2]
    assert [r[1] for r in rows if r[2] is not None] == [BAD]
