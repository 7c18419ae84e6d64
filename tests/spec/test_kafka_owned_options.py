"""Kafka reader options eo sets itself cannot be overridden through spec.source.kafka.options.

Spark's Kafka source reads option names in any case and the last value set wins, and eo's
reader applied the user's options after its own: ``failOnDataLoss: "false"`` would have made
Spark skip offsets Kafka no longer has (retention, a re-created topic) without failing, a
silent gap; ``subscribe`` or ``startingOffsets`` would have read other data than the fields say.
"""

from __future__ import annotations

from typing import Any

import pytest

from eo_jobs.spec import parse_pipeline
from tests.support.pipelines import document
from tests.support.pipelines import problems as _problems


def _kafka(**fields: Any) -> dict[str, Any]:
    source = {"bootstrapServers": "b:9092", "topics": ["orders"], "schema": "id BIGINT", **fields}
    return document(source={"kafka": source})


@pytest.mark.parametrize(
    ("key", "fix"),
    [
        ("failOnDataLoss", "a gap in a ledger"),
        ("FAILONDATALOSS", "a gap in a ledger"),
        ("kafka.bootstrap.servers", "spec.source.kafka.bootstrapServers"),
        ("subscribe", "spec.source.kafka.topics"),
        ("subscribePattern", "spec.source.kafka.topics"),
        ("assign", "spec.source.kafka.topics"),
        ("startingOffsets", "spec.source.kafka.startingOffsets"),
        ("maxOffsetsPerTrigger", "spec.source.kafka.maxOffsetsPerTrigger"),
    ],
)
def test_an_option_eo_sets_itself_is_refused_naming_the_field_to_use(key: str, fix: str) -> None:
    message = _problems(_kafka(options={key: "false"}))["spec.source.kafka.options"]
    assert f"key {key} is set by eo" in message
    assert fix in message


def test_other_reader_options_are_kept() -> None:
    options = {"kafka.security.protocol": "SSL", "minPartitions": "4", "groupIdPrefix": "eo"}
    pipeline = parse_pipeline(_kafka(options=options))
    assert pipeline.spec.source.kafka is not None
    assert pipeline.spec.source.kafka.options == options
