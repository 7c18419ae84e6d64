"""A failed attempt is rolled back by its partition's gid, also where the task set's index is
not the partition (a resubmitted stage runs only the missing partitions)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

pytest.importorskip("pyspark")

from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
from pyspark.sql import SparkSession
from tests.protocol import harness
from tests.support.postgres import PREPARED_HERE
from tests.support.spark import local_session

from eo_jobs.protocol.control import ControlStore
from eo_jobs.runtime.failed_attempts import FailedAttempts
from eo_jobs.runtime.task import WriterTask


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with local_session("eo-failed-attempts-partitions") as session:
        yield session


def test_a_failed_attempt_of_a_task_set_over_some_partitions_is_rolled_back_by_its_partition(
    spark: SparkSession, pg_dsn: str
) -> None:
    context = spark.sparkContext
    harness.create_table(pg_dsn)
    ControlStore(pg_dsn).ensure_schema()

    def fail(_rows: Iterator[int]) -> list[int]:  # pickled by value for the Python worker
        raise RuntimeError("writer task attempt failed after its PREPARE")

    task = WriterTask(
        writer=harness.writer(pg_dsn),
        pipeline=harness.PIPELINE,
        query_id=harness.QUERY,
        sink=harness.SINK,
        epoch=1,
        batch_id=4,
        two_phase=True,
        driver_pid=os.getpid(),
    )
    tag = f"eo-writer-{task.sink}-{task.batch_id}"
    rdd = context.parallelize(range(40), 4)
    context.addJobTag(tag)
    try:
        # Only partition 3 runs: its task set has one task, of index 0 and partition id 3,
        # as a result stage resubmitted for its one missing partition has.
        with pytest.raises(Py4JJavaError):
            context.runJob(rdd, fail, partitions=[3])
    finally:
        context.removeJobTag(tag)
    jvm: Any = context._jsc.sc()
    (job,) = jvm.statusTracker().getJobIdsForTag(tag)
    (stage,) = jvm.statusTracker().getJobInfo(job).get().stageIds()
    tasks = jvm.statusStore().taskList(stage, 0, 100)
    failed = tasks.apply(0)
    assert (failed.status(), failed.index(), failed.partitionId()) == ("FAILED", 0, 3)
    # What the failed attempt left prepared, under the gid the writer task uses.
    gid = task.gid(3, int(failed.taskId()))
    harness.writer(pg_dsn).write([(1, 4, 7, 0)], gid=gid, pipeline=harness.PIPELINE, batch_id=4)

    attempts = FailedAttempts(context, {task.sink: pg_dsn})
    try:
        attempts._sweep(task, tag)
    finally:
        attempts.close()

    assert attempts.rolled_back == [gid]
    with psycopg.connect(pg_dsn) as conn:
        left = conn.execute(PREPARED_HERE).fetchall()
    assert left == []
