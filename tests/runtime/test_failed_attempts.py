"""Polling Spark's status store for failed writer attempts copes with stages it no longer has."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession
from tests.support.spark import local_session

from eo_jobs.runtime.failed_attempts import stage_attempts


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    # The status store keeps the last N stages (spark.ui.retainedStages, 1,000 by default):
    # a long-running stream evicts old ones while the jobs that listed them are still kept.
    with local_session("eo-failed-attempts-test", {"spark.ui.retainedStages": "1"}) as session:
        yield session


def test_a_stage_evicted_from_the_status_store_has_no_attempts_instead_of_an_error(
    spark: SparkSession,
) -> None:
    context = spark.sparkContext
    tag = "eo-test-two-stages"
    context.addJobTag(tag)
    try:
        context.parallelize(range(10), 1).map(lambda x: (x % 2, 1)).reduceByKey(
            lambda a, b: a + b
        ).collect()
    finally:
        context.removeJobTag(tag)
    jvm: Any = context._jsc.sc()
    tracker, store = jvm.statusTracker(), jvm.statusStore()
    (job,) = tracker.getJobIdsForTag(tag)
    stages = sorted(tracker.getJobInfo(job).get().stageIds())
    assert len(stages) == 2, stages  # the map stage and the reduce stage behind the shuffle
    deadline = time.monotonic() + 30
    while list(stage_attempts(store, stages[0])) and time.monotonic() < deadline:
        time.sleep(0.2)  # the store trims itself asynchronously
    assert list(stage_attempts(store, stages[0])) == []
    assert list(stage_attempts(store, stages[1])) == [0]
