"""A sink's own query: over the pipeline's good rows, its own dead letters, and the pipeline's
dead letters carried once (by the first sink)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import DataFrame, SparkSession
from tests.support.spark import local_session

from eo_jobs.runtime.sink_query import SinkQuery
from eo_jobs.sinks.postgres.arrow_copy import DL_RAW, DL_REASON
from eo_jobs.spec.models import SinkSpec, Transform

TOTALS = SinkSpec.model_validate(
    {
        "name": "daily",
        "transform": {
            "sql": "SELECT merchant, sum(amount) AS volume, count(*) AS n FROM source "
            "GROUP BY merchant"
        },
        "postgres": {
            "dsn": {"env": "PG"},
            "table": "public.totals",
            "mode": "accumulate",
            "keyColumns": ["merchant"],
            "addColumns": ["volume", "n"],
        },
    }
)


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with local_session("eo-sink-query-test") as session:
        yield session


def _pipeline_frame(spark: SparkSession) -> DataFrame:
    """A one-pass frame: three good rows (one without merchant), one pipeline dead letter."""
    return spark.createDataFrame(
        [
            ("m1", 10, None, None),
            ("m1", 5, None, None),
            (None, 7, None, None),
            (None, None, "{oops", "does not parse"),
        ],
        f"merchant STRING, amount BIGINT, {DL_RAW} STRING, {DL_REASON} STRING",
    )


def _query(sql: str) -> SinkQuery:
    """The totals sink's query replaced by ``sql``."""
    query = SinkQuery.of(TOTALS.model_copy(update={"transform": Transform(sql=sql)}))
    assert query is not None
    return query


def test_a_sink_without_a_query_has_none() -> None:
    plain = TOTALS.model_copy(update={"transform": None})
    assert SinkQuery.of(plain) is None


def test_the_query_sums_the_good_rows_and_a_null_key_is_this_sink_s_dead_letter(
    spark: SparkSession,
) -> None:
    query = SinkQuery.of(TOTALS)
    assert query is not None

    rows = [r.asDict() for r in query.frame(_pipeline_frame(spark), False).collect()]

    good = sorted((r["merchant"], r["volume"], r["n"]) for r in rows if r[DL_REASON] is None)
    assert good == [("m1", 15, 2)]
    letters = [(r[DL_RAW], r[DL_REASON]) for r in rows if r[DL_REASON] is not None]
    assert letters == [
        (
            '{"volume":7,"n":1}',
            "upsert key column merchant is NULL: a unique index never matches NULL, so the row "
            "would be inserted again by every batch",
        )
    ]


def test_the_first_sink_carries_the_pipeline_s_dead_letters_once(spark: SparkSession) -> None:
    query = SinkQuery.of(TOTALS)
    assert query is not None

    rows = query.frame(_pipeline_frame(spark), True).collect()

    assert sorted((r[DL_RAW] or "")[:5] for r in rows if r[DL_REASON] is not None) == [
        '{"vol',
        "{oops",
    ]


def test_a_null_addend_is_a_dead_letter_not_a_silent_zero(spark: SparkSession) -> None:
    query = _query("SELECT merchant, CAST(NULL AS BIGINT) AS volume, 1 AS n FROM source")

    rows = query.frame(_pipeline_frame(spark).limit(1), False).collect()

    assert [r[DL_REASON] for r in rows] == [
        "accumulate column volume is NULL: it would add nothing to the running total; give it "
        "a value in the query (e.g. coalesce) or filter the row"
    ]


def test_the_slow_path_sets_aside_rows_the_query_fails_on_naming_the_sink(
    spark: SparkSession,
) -> None:
    query = _query("SELECT merchant, CAST(1 / (amount - 7) AS BIGINT) volume, 1 n FROM source")
    storable = _pipeline_frame(spark).filter(f"{DL_REASON} IS NULL").drop(DL_RAW, DL_REASON)

    kept, letters, cached = query.isolate(storable)
    try:
        assert sorted(r["merchant"] for r in kept.collect()) == ["m1", "m1"]
    finally:
        cached.unpersist()

    assert [(raw, reason.split(":")[0]) for raw, reason in letters] == [
        ('{"amount":7}', "sink daily")
    ]
    assert "DIVIDE_BY_ZERO" in letters[0][1]
