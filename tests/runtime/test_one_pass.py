"""The one-pass frame: rows and dead letters side by side, its expressions built once per schema."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession
from tests.support.spark import local_session

from eo_jobs.runtime.one_pass import OnePass
from eo_jobs.runtime.source import ERROR, RAW
from eo_jobs.sinks.postgres.arrow_copy import DL_RAW, DL_REASON

SCHEMA = f"id BIGINT, name STRING, {RAW} STRING, {ERROR} STRING"


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with local_session("eo-one-pass-test") as session:
        yield session


def test_each_batch_gets_its_rows_and_dead_letters_from_one_projection_built_once(
    spark: SparkSession,
) -> None:
    one_pass = OnePass(sql=None, key_columns={"id"})
    first = spark.createDataFrame(
        [(1, "a", None, None), (None, "b", None, None), (None, None, "{oops", "does not parse")],
        SCHEMA,
    )
    second = spark.createDataFrame([(2, "c\x00", None, None), (3, "d", None, None)], SCHEMA)

    rows = [sorted(one_pass.frame(batch).collect(), key=str) for batch in (first, second)]

    assert len(one_pass._projections) == 1
    assert [r.asDict() for r in rows[0] if r[DL_REASON] is None] == [
        {"id": 1, "name": "a", DL_RAW: None, DL_REASON: None}
    ]
    reasons = {(r[DL_RAW], r[DL_REASON].split(":")[0][:40]) for r in rows[0] if r[DL_REASON]}
    assert reasons == {
        ("{oops", "does not parse"),
        ('{"name":"b"}', "upsert key column id is NULL"),
    }
    assert [(r["id"], r[DL_REASON] is None) for r in rows[1]] == [(2, False), (3, True)]
    assert "NUL character" in rows[1][0][DL_REASON]
