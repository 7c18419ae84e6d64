"""Can a Spark column's values go into the table's column at all? Said before the first batch.

A value PostgreSQL refuses is one record's problem: it becomes a dead letter with the database's
words (``refusals``). A column whose *type* cannot take the Spark type is every record's
problem: each one would be a dead letter (a boolean or a fraction into an integer column), or
worse, land changed without an error (an instant into a ``date`` column keeps the day and drops
the time; a ``real`` keeps 24 bits of a ``bigint``). So the
driver checks the pairing once at start-up, with the table's real column types, and names both
types and the cast to write in ``spec.transform.sql``. ``docs/protocol.md`` ("Column types")
lists the table below for people.

Text goes anywhere: PostgreSQL parses it with the column type's own input function, so a
malformed value is that record's refusal, never a silent change.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from eo_jobs.sinks.postgres.contract import ContractProblem

INTEGERS = {"int2", "int4", "int8"}
FLOATS = {"float4", "float8"}
TEXT = {"text", "varchar", "bpchar", "name", "citext"}
JSON = {"json", "jsonb"}
INSTANTS = {"timestamp", "timestamptz"}

ACCEPTS: dict[str, set[str]] = {
    "boolean": {"bool", *TEXT},
    "tinyint": {*INTEGERS, "numeric", *FLOATS, *TEXT},
    "smallint": {*INTEGERS, "numeric", *FLOATS, *TEXT},
    "int": {*INTEGERS, "numeric", "float8", *TEXT},
    "bigint": {*INTEGERS, "numeric", *TEXT},
    "float": {*FLOATS, "numeric", *TEXT},
    "double": {"float8", "numeric", *TEXT},
    "decimal": {"numeric", *TEXT},
    "date": {"date", *INSTANTS, *TEXT},
    "timestamp": {*INSTANTS, *TEXT},
    "timestamp_ntz": {*INSTANTS, *TEXT},
    "binary": {"bytea"},
    "array": {"_array", *JSON, *TEXT},
    "map": {*JSON, *TEXT},
    "struct": {*JSON, *TEXT},
}
"""Spark type (its ``simpleString`` without parameters) -> PostgreSQL base types that take its
values unchanged or refuse one loudly. A narrower integer is allowed (PostgreSQL refuses an
out-of-range value: that record's dead letter); what would change values silently is not:
``int`` goes into ``float8`` (53 bits) but not ``float4`` (24), ``bigint`` into ``numeric`` but
no float, a time of day is never dropped into ``date``. Nor is what every record would fail
(a fraction into an integer column, a boolean into a number). ``_array`` is any PostgreSQL
array type. Strings go anywhere."""

CASTS: dict[str, str] = {
    "int2": "SMALLINT",
    "int4": "INT",
    "int8": "BIGINT",
    "float4": "FLOAT",
    "float8": "DOUBLE",
    "numeric": "DECIMAL(p, s)",
    "bool": "BOOLEAN",
    "date": "DATE",
    "timestamp": "TIMESTAMP_NTZ",
    "timestamptz": "TIMESTAMP",
    "bytea": "BINARY",
}
"""The Spark cast that fits a PostgreSQL type, for the message (anything else: STRING)."""

COLUMN_TYPES_SQL = """SELECT a.attname,
       format_type(a.atttypid, a.atttypmod),
       coalesce(base.typname, t.typname),
       coalesce(base.typcategory, t.typcategory)
  FROM pg_attribute a
  JOIN pg_type t ON t.oid = a.atttypid
  LEFT JOIN pg_type base ON t.typtype = 'd' AND base.oid = t.typbasetype
 WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped"""
"""Each column's declared type, and its base type's name and category (a domain is checked as
the type it is over)."""


def spark_kind(simple: str) -> str:
    """``decimal(12,2)`` -> ``decimal``, ``array<string>`` -> ``array``: the key of ``ACCEPTS``."""
    return re.split(r"[<(]", simple, maxsplit=1)[0].strip().lower()


def column_type_problems(
    conn: psycopg.Connection[Any], table: str, columns: Sequence[tuple[str, str]]
) -> list[ContractProblem]:
    """Every written column whose Spark type the table's column cannot hold unchanged.

    ``columns``: (name, Spark ``simpleString``) of the pipeline's output, in order. Columns the
    table lacks are the contract's own problem (``missing-columns``) and skipped here.
    """
    schema, _, name = table.partition(".")
    regclass = psycopg.sql.Identifier(schema, name).as_string(conn)
    found: Mapping[str, tuple[str, str, str]] = {
        str(r[0]): (str(r[1]), str(r[2]), str(r[3]))
        for r in conn.execute(COLUMN_TYPES_SQL, (regclass,)).fetchall()
    }
    problems: list[ContractProblem] = []
    for column, simple in columns:
        if column not in found:
            continue
        declared, base, category = found[column]
        kind = spark_kind(simple)
        if kind == "string" or kind not in ACCEPTS:
            continue
        fits = ACCEPTS[kind]
        if base in fits or (category == "A" and "_array" in fits):
            continue
        cast = CASTS.get(base, "STRING")
        problems.append(
            ContractProblem(
                "column-type",
                f"column {column}: Spark type {simple} cannot go into {table}'s PostgreSQL "
                f"type {declared} unchanged (every record would be refused, or changed); cast "
                f"it in spec.transform.sql, e.g. CAST({column} AS {cast}), or change the "
                "column's type",
            )
        )
    return problems
