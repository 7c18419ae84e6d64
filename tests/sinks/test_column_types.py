"""A Spark type the table's column cannot hold unchanged is named before the first batch.

Checked against a real PostgreSQL's catalog: declared types, domains (checked as their base
type), enums and arrays.
"""

from __future__ import annotations

import psycopg
import pytest

from eo_jobs.sinks.postgres.column_types import column_type_problems, spark_kind

DDL = """
CREATE DOMAIN public.cents AS bigint CHECK (VALUE >= 0);
CREATE TYPE public.mood AS ENUM ('calm', 'busy');
CREATE TABLE public.typed (
    "Order Id" bigint, small smallint, ratio real, wide double precision, amount numeric(12, 2),
    flag boolean, day date, at timestamptz, wall timestamp, note varchar(20), mood public.mood,
    uid uuid, doc jsonb, tags text[], blob bytea, price public.cents
)"""


@pytest.fixture
def conn(pg_dsn: str) -> psycopg.Connection[tuple[object, ...]]:
    connection = psycopg.connect(pg_dsn, autocommit=True)
    connection.execute(DDL)
    return connection


@pytest.mark.parametrize(
    ("column", "spark"),
    [
        ("Order Id", "bigint"),
        ("small", "smallint"),
        ("small", "bigint"),
        ("ratio", "float"),
        ("ratio", "smallint"),
        ("wide", "int"),
        ("wide", "double"),
        ("amount", "decimal(12,2)"),
        ("amount", "bigint"),
        ("flag", "boolean"),
        ("day", "date"),
        ("at", "timestamp"),
        ("at", "date"),
        ("wall", "timestamp_ntz"),
        ("note", "bigint"),
        ("mood", "string"),
        ("uid", "string"),
        ("doc", "struct<a:int>"),
        ("doc", "map<string,int>"),
        ("tags", "array<string>"),
        ("blob", "binary"),
        ("price", "bigint"),
        ("price", "int"),
    ],
)
def test_a_column_that_holds_every_value_of_the_spark_type_passes(
    conn: psycopg.Connection[tuple[object, ...]], column: str, spark: str
) -> None:
    assert column_type_problems(conn, "public.typed", [(column, spark)]) == []


@pytest.mark.parametrize(
    ("column", "spark", "declared", "cast"),
    [
        ("Order Id", "boolean", "bigint", "BIGINT"),
        ("small", "double", "smallint", "SMALLINT"),
        ("ratio", "bigint", "real", "FLOAT"),
        ("wide", "bigint", "double precision", "DOUBLE"),
        ("day", "timestamp", "date", "DATE"),
        ("flag", "int", "boolean", "BOOLEAN"),
        ("blob", "array<int>", "bytea", "BINARY"),
        ("mood", "int", "mood", "STRING"),
        ("price", "double", "cents", "BIGINT"),
    ],
)
def test_a_column_that_cannot_hold_the_spark_type_is_named_with_both_types_and_a_cast(
    conn: psycopg.Connection[tuple[object, ...]],
    column: str,
    spark: str,
    declared: str,
    cast: str,
) -> None:
    (problem,) = column_type_problems(conn, "public.typed", [(column, spark)])
    assert problem.code == "column-type"
    assert f"column {column}: Spark type {spark} " in problem.message
    assert f"PostgreSQL type {declared} " in problem.message or declared in problem.message
    assert f"CAST({column} AS {cast})" in problem.message


def test_columns_the_table_lacks_are_left_to_the_contract_check(
    conn: psycopg.Connection[tuple[object, ...]],
) -> None:
    assert column_type_problems(conn, "public.typed", [("absent", "boolean")]) == []


def test_parameters_and_element_types_do_not_change_the_kind() -> None:
    assert spark_kind("decimal(38,18)") == "decimal"
    assert spark_kind("array<struct<a:int>>") == "array"
    assert spark_kind("TIMESTAMP_NTZ") == "timestamp_ntz"
