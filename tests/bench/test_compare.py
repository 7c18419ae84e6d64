"""The bench runs every variant, the protocol figures and the kill test on a tiny input.

A smoke test of the measuring machinery, not of speed: no figure is compared with a threshold.
What it does check is what makes the figures trustworthy: every variant ran every batch and
was audited, the exactly-once ones exactly, and the JSON keeps the field names the README
table is generated from.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import compare, kafka_input, readme_table, variants

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SIZE = "1000x3"
VARIANT_FIELDS = {
    "variant",
    "size",
    "rows_per_batch",
    "rows_per_s",
    "rows_per_s_whole",
    "batches",
    "batch_p50_s",
    "decide_commit_p50_ms",
    "duplicates",
    "missing",
    "wrong",
    "in_doubt",
    "exact",
}


def test_every_variant_runs_is_audited_and_reported_in_stable_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "bench.json"
    code = compare.main(
        [
            "--sizes",
            SIZE,
            "--events-per-file",
            "500",
            "--phase2-partitions",
            "1,4",
            "--phase2-batches",
            "2",
            "--in-doubt",
            "20",
            "--recovery-size",
            "1000x4",
            "--json",
            str(report),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out

    doc = json.loads(report.read_text())
    assert doc["schema"] == compare.JSON_SCHEMA
    assert {"pyspark", "postgresql", "cores", "load_average_start"} <= set(doc["environment"])
    (size,) = doc["sizes"]
    assert (size["size"], size["rows_per_batch"], size["batches"]) == (SIZE, 1000, 3)
    rows = {row["variant"]: row for row in size["variants"]}
    assert sorted(rows) == sorted(v.name for v in variants.VARIANTS)
    for name, row in rows.items():
        assert set(row) >= VARIANT_FIELDS, name
        assert row["batches"] == 3, (name, row)
        assert row["rows_per_s"] > 0, (name, row)
        if variants.BY_NAME[name].writes:
            assert (row["missing"], row["wrong"]) == (0, 0), (name, row)
    for name in (v.name for v in variants.VARIANTS if v.two_phase):
        assert rows[name]["exact"] is True, rows[name]
        assert rows[name]["decide_commit_p50_ms"] is not None
    assert set(size["ratios"]) == {
        "eo_alo", "eo_jdbc", "eo_noop", "eo_copy", "totals_eo", "sums_eo", "mysql_eo_jdbc"
    }  # fmt: skip
    assert all(value is not None for value in size["ratios"].values()), size["ratios"]

    shapes = {(p["partitions"], p["sinks"]) for p in doc["protocol"]["phase2"]}
    assert shapes == {(1, 1), (4, 1), (1, 2), (4, 2)}
    in_doubt = doc["protocol"]["in_doubt"]
    assert in_doubt["exact"] is True, in_doubt
    assert in_doubt["committed"] + in_doubt["rolled_back"] == 20
    assert in_doubt["committed"] and in_doubt["rolled_back"], "both outcomes are exercised"
    recovery = doc["recovery"]
    assert recovery["exact"] is True, recovery
    assert recovery["kill_to_first_batch_s"] == pytest.approx(
        recovery["spark_startup_s"] + recovery["fence_resolve_s"] + recovery["first_batch_s"]
    )

    # The README table is generated from this JSON.
    table = readme_table.render(doc)
    assert "exactly-once" in table and "EO/JDBC" in table


@pytest.mark.kafka
def test_a_kafka_source_feeds_every_variant_the_same_topic_cut_by_max_offsets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 31: eo and Spark's JDBC writer read one topic of 4 partitions, 1,000 records a
    batch, and both tables audit exact against the generated events."""
    report = tmp_path / "bench.json"
    code = compare.main(
        [
            "--source",
            "kafka",
            "--kafka-partitions",
            "4",
            "--sizes",
            SIZE,
            "--events-per-file",
            "500",
            "--variants",
            "exactly-once,spark-jdbc",
            "--no-protocol",
            "--recovery-size",
            "none",
            "--json",
            str(report),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out

    doc = json.loads(report.read_text())
    assert (doc["settings"]["source"], doc["settings"]["kafka_partitions"]) == ("kafka", 4)
    (size,) = doc["sizes"]
    rows = {row["variant"]: row for row in size["variants"]}
    assert sorted(rows) == ["exactly-once", "spark-jdbc"]
    for name, row in rows.items():
        assert row["batches"] == 3, (name, row)
        assert (row["duplicates"], row["missing"], row["wrong"]) == (0, 0, 0), (name, row)
    assert rows["exactly-once"]["exact"] is True
    assert "source Kafka, 4 partitions per topic" in out
    assert "## targets (issue 31)" not in out, "no Kafka target is at this size"


def test_a_sizes_topic_name_is_a_legal_kafka_topic() -> None:
    assert kafka_input.topic_name("medium") == "orders-medium"
    assert kafka_input.topic_name("2000x3:1") == "orders-2000x3-1"
