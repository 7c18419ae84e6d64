"""A batch with a record that does not parse is found by its failure and read again, exactly.

The file source streams with FAILFAST (no corrupt-record column); these run a real local Spark
on real files and a real checkpoint: the failure is recognised through Spark's wrapping, the
checkpoint names each batch's files (compacted logs included), and reading those files again
gives every record once, the malformed ones with their text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from tests.support.pipelines import document
from tests.support.spark import local_session

from eo_jobs.runtime.checkpoint import CheckpointLog, _read_local
from eo_jobs.runtime.reread import MAX_PATIENCE, ReadPolicy, Reread, is_malformed
from eo_jobs.runtime.source import ERROR, RAW, read_source
from eo_jobs.spec import parse_pipeline
from eo_jobs.spec.models import PipelineSpec

SCHEMA = "id BIGINT, note STRING"
NAMES = ["plain.json", "with space.json", "per%cent.json", "glob[1]{a,b}*?.json"]
"""File names a reader path would misread: encoded in the log, or glob characters."""


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with local_session("eo-reread-test") as session:
        yield session


def _spec(folder: Path, fmt: str = "json") -> PipelineSpec:
    source = {"path": str(folder), "format": fmt, "schema": SCHEMA, "maxFilesPerTrigger": 1}
    return parse_pipeline(document(source={"files": source})).spec


def _write(folder: Path, name: str, lines: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{len(list(folder.iterdir()))}.tmp"
    tmp.write_text("".join(line + "\n" for line in lines))
    tmp.rename(folder / name)


def _stream(spark: SparkSession, spec: PipelineSpec, checkpoint: Path, each: Any) -> None:
    query = (
        read_source(spark, spec)
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)


def test_the_checkpoint_names_each_batchs_files_compacted_logs_included(
    spark: SparkSession, tmp_path: Path
) -> None:
    folder = tmp_path / "in"
    # Twelve batches of one file: Spark compacts its source log at batch 9 (9.compact).
    names = [*NAMES, *[f"f{i:02d}.json" for i in range(8)]]
    for index, name in enumerate(names):
        _write(folder, name, [json.dumps({"id": index, "note": name})])
    seen: dict[int, set[str]] = {}

    def each(df: DataFrame, batch_id: int) -> None:
        seen[batch_id] = {r[0] for r in df.select(F.input_file_name()).distinct().collect()}

    _stream(spark, _spec(folder), tmp_path / "ckpt", each)
    log = CheckpointLog(str(tmp_path / "ckpt"), _read_local)
    assert (tmp_path / "ckpt" / "sources" / "0" / "9.compact").exists()
    assert len(seen) == len(names)
    for batch_id, files in seen.items():
        assert set(log.source_files(batch_id)) == files, batch_id


def test_a_malformed_record_fails_the_stream_and_its_batch_read_again_keeps_it_aside(
    spark: SparkSession, tmp_path: Path
) -> None:
    folder = tmp_path / "in"
    _write(folder, NAMES[0], [json.dumps({"id": 1, "note": "a"})])
    good = [json.dumps({"id": i, "note": f"n{i}"}) for i in range(10, 13)]
    bad = ['{"id": 14, "note": ', '{"id": "fifteen", "note": "x"}']
    _write(folder, NAMES[3], [*good, bad[0], json.dumps({"id": 13, "note": "n13"}), bad[1]])
    spec = _spec(folder)
    log = CheckpointLog(str(tmp_path / "ckpt"), _read_local)
    reread = Reread.of(spark, spec, log)
    assert reread is not None
    outcome: dict[int, Any] = {}

    def each(df: DataFrame, batch_id: int) -> None:
        try:
            outcome[batch_id] = sorted(r[0] for r in df.collect())
        except Exception as exc:
            assert is_malformed(exc), exc
            rows = reread.frame(batch_id).collect()
            outcome[batch_id] = sorted((r["id"], r[RAW], r[ERROR]) for r in rows if r[RAW])
            outcome[-batch_id] = sorted(r["id"] for r in rows if not r[RAW])

    _stream(spark, spec, tmp_path / "ckpt", each)
    assert outcome[0] == [1]  # a clean batch: its one pass stands
    assert outcome[-1] == [10, 11, 12, 13]
    assert [(raw, error) for _, raw, error in outcome[1]] == [
        (line, "does not parse as json with the declared schema") for line in sorted(bad)
    ]


def test_a_re_read_of_a_partitioned_folder_keeps_the_partition_values_the_stream_saw(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Hive-style folders (``day=.../x.json``) give the stream a partition column from the
    path; reading the batch's files again by name must give the same value, not the file's
    content (the second protocol audit's first "unsure" item)."""
    folder = tmp_path / "in"
    _write(folder / "day=2026-11-28", "a.json", [json.dumps({"id": 1, "note": "a"})])
    _write(
        folder / "day=2026-11-29",
        "b.json",
        [json.dumps({"id": 2, "note": "b", "day": "in-the-file"}), '{"id": 3, "note": '],
    )
    source = {"path": str(folder), "format": "json", "schema": f"{SCHEMA}, day STRING"}
    spec = parse_pipeline(document(source={"files": source})).spec
    log = CheckpointLog(str(tmp_path / "ckpt"), _read_local)
    reread = Reread.of(spark, spec, log)
    assert reread is not None
    outcome: dict[str, Any] = {}

    def each(df: DataFrame, batch_id: int) -> None:
        try:
            df.collect()
        except Exception as exc:
            assert is_malformed(exc), exc
        rows = reread.frame(batch_id).collect()
        outcome["rows"] = sorted((r["id"] or 0, r["day"]) for r in rows)

    _stream(spark, spec, tmp_path / "ckpt", each)
    assert outcome["rows"] == [(0, "2026-11-29"), (1, "2026-11-28"), (2, "2026-11-29")]


def test_only_a_record_that_does_not_parse_counts_as_malformed(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = tmp_path / "t.csv"
    path.write_text("id,note\n1,a\nnot-a-number,b\n")
    failfast = spark.read.schema(SCHEMA).option("mode", "FAILFAST").option("header", "true")
    with pytest.raises(Exception) as malformed:
        failfast.csv(str(path)).collect()
    assert is_malformed(malformed.value)
    spark.conf.set("spark.sql.ansi.enabled", "true")
    with pytest.raises(Exception) as cast:
        spark.sql("SELECT CAST('x' AS INT)").collect()
    assert not is_malformed(cast.value)
    assert not is_malformed(RuntimeError("MALFORMED_RECORD_IN_PARSING"))


def test_only_a_text_file_source_is_read_again(spark: SparkSession, tmp_path: Path) -> None:
    """Parquet has nothing to parse (a Kafka source's own tests: test_reread_kafka.py)."""
    log = CheckpointLog(str(tmp_path / "ckpt"), _read_local)
    assert Reread.of(spark, _spec(tmp_path, "csv"), log) is not None
    assert Reread.of(spark, _spec(tmp_path, "parquet"), log) is None


def _reads(dirty: list[bool]) -> list[str]:
    """How ``ReadPolicy`` reads each batch of a stream (True: the batch has a malformed record):
    ``fast`` (the fast pass held), ``failed`` (it did not: read again), ``column`` (at once)."""
    policy = ReadPolicy()
    reads = []
    for has_malformed in dirty:
        if policy.fast_first() and not has_malformed:
            reads.append("fast")
            continue
        if policy.fast_first():
            policy.failed()
            reads.append("failed")
        else:
            reads.append("column")
        policy.read_with_column(1 if has_malformed else 0)
    return reads


def test_clean_input_always_takes_the_fast_pass() -> None:
    assert _reads([False] * 100) == ["fast"] * 100


def test_one_malformed_batch_costs_one_failed_pass_and_two_batches_with_the_column() -> None:
    dirty = [False] * 3 + [True] + [False] * 6
    assert _reads(dirty) == ["fast"] * 3 + ["failed", "column", "column"] + ["fast"] * 4


def test_input_with_a_malformed_record_every_few_batches_settles_on_the_column() -> None:
    """Patience doubles with each failed fast pass: with a malformed record every 10th batch,
    the fast pass fails a few times early on, then never again."""
    reads = _reads([i % 10 == 9 for i in range(1000)])
    assert 1 <= reads.count("failed") <= 5
    assert "failed" not in reads[100:]
    assert "fast" not in reads[100:]


def test_patience_is_bounded_so_input_that_turns_clean_gets_the_fast_pass_back() -> None:
    """A malformed record every 200th batch fails the fast pass each time (the gap is longer
    than any patience), doubling patience to its cap; after the last one, MAX_PATIENCE
    batches with the column, then the fast pass for good."""
    reads = _reads([i % 200 == 0 for i in range(1801)] + [False] * 200)
    assert reads.count("failed") == 10
    assert reads[1801 : 1801 + MAX_PATIENCE] == ["column"] * MAX_PATIENCE
    assert reads[1801 + MAX_PATIENCE :] == ["fast"] * (200 - MAX_PATIENCE)
