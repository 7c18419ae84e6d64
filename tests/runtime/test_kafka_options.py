"""The Kafka reader's options: eo's read defaults, overridden by the pipeline's own options."""

from __future__ import annotations

import pytest
from tests.support.pipelines import document

from eo_jobs.runtime.source import KAFKA_READ_DEFAULTS, kafka_options
from eo_jobs.spec import parse_pipeline
from eo_jobs.spec.models import KafkaSource


def _source(options: dict[str, str]) -> KafkaSource:
    kafka = {
        "bootstrapServers": "k:9092",
        "topics": ["t"],
        "schema": "id BIGINT",
        "options": options,
    }
    source = parse_pipeline(document(source={"kafka": kafka})).spec.source.kafka
    assert source is not None
    return source


def test_eo_reads_with_larger_polls_and_fetches_than_kafka_s_defaults() -> None:
    got = kafka_options(_source({}), {})
    assert got["kafka.bootstrap.servers"] == "k:9092"
    assert got["kafka.max.poll.records"] == "10000"
    assert int(got["kafka.max.partition.fetch.bytes"]) == 4 * 1024 * 1024
    assert KAFKA_READ_DEFAULTS.items() <= got.items()


def test_the_pipeline_s_options_override_eo_s_defaults_and_secrets_come_last() -> None:
    source = _source({"kafka.max.poll.records": "500", "kafka.security.protocol": "SASL_SSL"})
    got = kafka_options(source, {"kafka.sasl.jaas.config": "secret"})
    assert got["kafka.max.poll.records"] == "500"
    assert got["kafka.security.protocol"] == "SASL_SSL"
    assert got["kafka.sasl.jaas.config"] == "secret"


@pytest.mark.parametrize("option", ["minOffsetsPerTrigger", "maxTriggerDelay"])
def test_a_batch_read_again_leaves_out_what_only_a_stream_takes(option: str) -> None:
    source = _source({option: "5" if option == "minOffsetsPerTrigger" else "10s"})
    assert option in kafka_options(source, {}, streaming=True)
    assert option not in kafka_options(source, {}, streaming=False)


@pytest.mark.parametrize(
    "option",
    [
        "startingTimestamp",
        "startingOffsetsByTimestamp",
        "startingOffsetsByTimestampStrategy",
        "endingOffsets",
        "endingTimestamp",
        "endingOffsetsByTimestamp",
    ],
)
def test_a_batch_read_again_by_its_offsets_takes_no_option_that_moves_its_range(
    option: str,
) -> None:
    """Spark prefers a timestamp option over the offsets a re-read gives (another range)."""
    source = _source({option: "0"})
    assert option in kafka_options(source, {}, streaming=True)
    assert option not in kafka_options(source, {}, streaming=False)
