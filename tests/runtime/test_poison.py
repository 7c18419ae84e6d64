"""Rows no sink can store: a NUL character (U+0000) in text, nested or not; a NULL upsert key."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession
from tests.support.spark import local_session

from eo_jobs.runtime.poison import split_unstorable

BACKSLASH_U0000 = "\\u0000"
"""Six characters of ordinary text: a backslash, then ``u0000``. PostgreSQL stores it as is."""


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with local_session("eo-poison-test") as session:
        yield session


def _flagged(spark: SparkSession, ddl: str, rows: list[tuple[object, ...]]) -> list[object]:
    """The ``id`` of every row ``split_unstorable`` sets aside, and checks it keeps the rest."""
    df = spark.createDataFrame(rows, ddl)
    storable, unstorable = split_unstorable(df, set())
    kept = sorted(r["id"] for r in storable.collect())
    flagged = sorted(int(raw.split('"id":')[1].split(",")[0]) for raw, _ in unstorable)
    assert sorted(kept + flagged) == sorted(r[0] for r in rows)
    assert all("NUL character" in reason for _, reason in unstorable)
    return flagged


def test_a_nul_anywhere_in_text_is_found_and_nothing_else_is(spark: SparkSession) -> None:
    rows: list[tuple[object, ...]] = [
        (1, "\x00abc"),
        (2, "ab\x00c"),
        (3, "abc\x00"),
        (4, "\x00"),
        (5, "héllo wörld €\x00"),
        (6, ""),
        (7, None),
        (8, "héllo wörld €"),
        (9, BACKSLASH_U0000),
        (10, "\x01\x7f"),
    ]

    assert _flagged(spark, "id INT, s STRING", rows) == [1, 2, 3, 4, 5]


def test_a_nul_inside_nested_values_is_found_but_the_text_backslash_u0000_is_not(
    spark: SparkSession,
) -> None:
    """Nested columns are checked on their JSON, where U+0000 is the escape ``\\u0000`` and a
    backslash in the text is ``\\\\``: only an escape preceded by an even run of backslashes is
    the character."""
    ddl = "id INT, a ARRAY<STRING>, m MAP<STRING, STRING>, st STRUCT<x: STRING>"
    rows: list[tuple[object, ...]] = [
        (1, ["ok", "x\x00"], None, None),
        (2, None, {"k\x00": "v"}, None),
        (3, None, {"k": "\x00"}, None),
        (4, None, None, {"x": "\x00tail"}),
        (5, ["\\\x00"], None, None),  # a backslash, then U+0000: JSON "\\\u0000"
        (6, [BACKSLASH_U0000], None, None),  # JSON "\\u0000": text, not the character
        (7, None, {BACKSLASH_U0000: "\\\\u0000"}, {"x": "a\\" + BACKSLASH_U0000}),
        (8, ["plain"], {"k": "v"}, {"x": "y"}),
    ]

    assert _flagged(spark, ddl, rows) == [1, 2, 3, 4, 5]
