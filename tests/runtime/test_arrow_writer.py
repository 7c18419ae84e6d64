"""The writer job: its mapInArrow UDF made once, each batch's id carried to the tasks of its job."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")

import pyarrow as pa
from pyspark.sql import SparkSession
from tests.support.spark import local_session

from eo_jobs.runtime.arrow_writer import (
    BATCH_PROPERTY,
    ArrowMap,
    ArrowWriteJob,
    current_batch,
)


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with local_session("eo-arrow-writer-test") as session:
        yield session


def reporter() -> ArrowMap:
    """A task that names its job's batch in the gid and counts its rows and their columns.

    Made inside a function so that it is pickled by value (the workers cannot import tests).
    """

    def report(batches: Iterable[Any]) -> Iterator[Any]:
        rows, names = 0, ""
        for batch in batches:
            rows += batch.num_rows
            names = ",".join(batch.schema.names)
        yield pa.RecordBatch.from_pydict(
            {"sink": [names], "gid": [str(current_batch())], "count": [rows], "dead": [0]}
        )

    return report


def test_each_batch_s_tasks_learn_that_batch_s_id_from_one_udf_built_once(
    spark: SparkSession,
) -> None:
    job = ArrowWriteJob(reporter())
    udf = job.udf
    first = spark.range(0, 10, numPartitions=2).selectExpr("id", "id * 2 AS twice")
    second = spark.range(0, 6, numPartitions=3).selectExpr("id", "id + 1 AS twice")

    one = job.run(first, ["id", "twice"], 7)
    two = job.run(second, ["id", "twice"], 8)

    assert sorted(one) == [("id,twice", "7", 5, 0)] * 2
    assert sorted(two) == [("id,twice", "8", 2, 0)] * 3
    assert job.udf is udf and len(job._calls) == 1
    assert spark.sparkContext.getLocalProperty(BATCH_PROPERTY) is None


def test_columns_are_bound_by_their_exact_names(spark: SparkSession) -> None:
    frame = spark.range(0, 4, numPartitions=1).selectExpr("id AS `a.b`", "id AS `c``d`")

    (result,) = ArrowWriteJob(reporter()).run(frame, ["a.b", "c`d"], 3)

    assert result == ("a.b,c`d", "3", 4, 0)


def test_the_batch_id_is_cleared_when_the_job_fails(spark: SparkSession) -> None:
    def fail(batches: Iterable[Any]) -> Iterator[Any]:
        raise RuntimeError("writer failed")
        yield  # a generator, like every mapInArrow function

    with pytest.raises(Exception, match="writer failed"):
        ArrowWriteJob(fail).run(spark.range(0, 2, numPartitions=1), ["id"], 5)

    assert spark.sparkContext.getLocalProperty(BATCH_PROPERTY) is None


def test_a_task_of_a_job_without_a_batch_id_refuses_to_write(spark: SparkSession) -> None:
    frame = spark.range(0, 2, numPartitions=1)

    with pytest.raises(Exception, match=f"writer task without a batch id.*{BATCH_PROPERTY}"):
        frame.mapInArrow(reporter(), "sink string, gid string, count bigint, dead bigint").collect()
