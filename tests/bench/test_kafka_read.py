"""The Kafka reader probe on a tiny topic: every variant timed and named, the ratio column
only for the parsed variants. Never a timing threshold."""

from __future__ import annotations

import pytest

from bench import kafka_read

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]


def test_a_tiny_probe_times_every_variant_on_one_topic(capsys: pytest.CaptureFixture[str]) -> None:
    assert kafka_read.main(["--events", "2000", "--partitions", "2", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "2,000 events, 2 partitions, median of 1" in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    names = [row.split("|")[1].strip() for row in rows[1:]]
    assert names == [
        "values only, Kafka's defaults",
        "values only, eo's defaults",
        "from_json, Kafka's defaults",
        "from_json, max.poll.records only",
        "from_json, max.partition.fetch.bytes only",
        "from_json, eo's defaults",
    ]
    ratios = {name: row.split("|")[4].strip() for name, row in zip(names, rows[1:], strict=True)}
    assert ratios["from_json, Kafka's defaults"] == "1.00"
    assert ratios["values only, eo's defaults"] == "-"
