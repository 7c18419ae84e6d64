"""Arrow record batches land in PostgreSQL value for value, through binary COPY or CSV.

The writer picks binary COPY (pgpq) when every column's type reads the binary payload as is,
and CSV otherwise; both must store the same values: NULL apart from '', quotes, delimiters
and newlines in text, extreme integers, NaN and infinities, numerics, dates and timestamps
on both sides of 2000-01-01 (binary counts from there), instants and wall times.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

import psycopg
import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from eo_jobs.sinks.postgres.arrow_copy import (
    DL_RAW,
    DL_REASON,
    DeadLetters,
    arrow_body,
    binary_encoder,
    column_types,
    split_dead_letters,
)
from eo_jobs.sinks.postgres.writer import PostgresWriter

UTC = dt.UTC
COLUMNS: dict[str, tuple[Any, str, list[Any]]] = {
    "seq": (pa.int64(), "bigint", [0, 1, 2, 3, 4, 5]),
    "id": (pa.int64(), "bigint", [0, -(2**63), 2**63 - 1, None, 7, 8]),
    "small": (pa.int16(), "smallint", [-32768, 32767, 0, None, 1, -1]),
    "mid": (pa.int32(), "integer", [-(2**31), 2**31 - 1, 0, None, 1, -1]),
    "f64": (pa.float64(), "double precision", [1.5, math.nan, math.inf, -math.inf, None, 1e-300]),
    "f32": (pa.float32(), "real", [1.5, math.nan, math.inf, -2.5, None, 0.0]),
    "amount": (
        pa.decimal128(38, 10),
        "numeric(38, 10)",
        [
            Decimal("-1234567890123456789.0123456789"),
            Decimal("0E-10"),
            Decimal("1E-10"),
            None,
            Decimal("99.5000000000"),
            Decimal("-0.0000000001"),
        ],
    ),
    "note": (
        pa.string(),
        "text",
        ["", None, 'a,"b"\n c\\N', "ünïcødé ✓ \t", "\\N", "  spaces  "],
    ),
    "code": (pa.string(), "varchar(20)", ["EUR", "", None, "x,y", '"', "line\r\nbreak"]),
    "ok": (pa.bool_(), "boolean", [True, False, None, True, False, None]),
    "day": (
        pa.date32(),
        "date",
        [
            dt.date(1970, 1, 1),
            dt.date(1, 1, 1),
            dt.date(9999, 12, 31),
            None,
            dt.date(1999, 12, 31),
            dt.date(2000, 1, 1),
        ],
    ),
    "at": (
        pa.timestamp("us", tz="UTC"),
        "timestamptz",
        [
            dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
            dt.datetime(2000, 1, 1, tzinfo=UTC),
            dt.datetime(2026, 3, 29, 1, 30, 0, 1, tzinfo=UTC),
            None,
            dt.datetime(1, 1, 1, tzinfo=UTC),
            dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        ],
    ),
    "wall": (
        pa.timestamp("us"),
        "timestamp",
        [
            dt.datetime(2026, 10, 25, 2, 30),
            dt.datetime(1999, 12, 31, 23, 59, 59, 999999),
            None,
            dt.datetime(2000, 1, 1, 0, 0, 0, 1),
            dt.datetime(1900, 2, 28, 12),
            dt.datetime(2262, 4, 11),
        ],
    ),
}


def _batches() -> list[Any]:
    """The rows as three record batches, one of them empty (as a filtered batch can be)."""
    schema = pa.schema([(name, kind) for name, (kind, _, _) in COLUMNS.items()])
    table = pa.table({name: pa.array(v, type=k) for name, (k, _, v) in COLUMNS.items()})
    empty = pa.RecordBatch.from_pylist([], schema=schema)
    return [*table.slice(0, 4).to_batches(), empty, *table.slice(4).to_batches()]


def _create(dsn: str, table: str, overrides: dict[str, str]) -> None:
    columns = ", ".join(f"{n} {overrides.get(n, ddl)}" for n, (_, ddl, _) in COLUMNS.items())
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} ({columns})")


def _write(dsn: str, table: str) -> int:
    writer = PostgresWriter(dsn=dsn, table=table, columns=tuple(COLUMNS))
    return writer.write_with(
        arrow_body(writer, iter(_batches())), gid=None, pipeline="p", batch_id=0
    )


def _stored(dsn: str, table: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        return conn.execute(f"SELECT {', '.join(COLUMNS)} FROM {table} ORDER BY seq").fetchall()


def _same(left: Any, right: Any) -> bool:
    if isinstance(left, float) and isinstance(right, float) and math.isnan(left):
        return math.isnan(right)
    return bool(left == right)


def _expected() -> list[tuple[Any, ...]]:
    return list(zip(*(values for _, _, values in COLUMNS.values()), strict=True))


def _assert_rows(actual: list[tuple[Any, ...]], expected: list[tuple[Any, ...]]) -> None:
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        for name, g, w in zip(COLUMNS, got, want, strict=True):
            if name == "f32" and isinstance(w, float) and not math.isnan(w):
                assert g == pytest.approx(w), name
            else:
                assert _same(g, w), f"{name}: stored {g!r}, sent {w!r}"


def test_matching_column_types_go_through_binary_copy_value_for_value(pg_dsn: str) -> None:
    _create(pg_dsn, "public.exact", {})
    with psycopg.connect(pg_dsn) as conn:
        types = column_types(conn, "public.exact")
    assert binary_encoder(_batches()[0].schema, types) is not None
    assert _write(pg_dsn, "public.exact") == 6
    _assert_rows(_stored(pg_dsn, "public.exact"), _expected())


def test_a_column_binary_copy_cannot_feed_sends_the_batch_through_csv_with_the_same_values(
    pg_dsn: str,
) -> None:
    # int64 into numeric, int16 into bigint: CSV parses them, binary COPY would refuse them.
    overrides = {"id": "numeric", "small": "bigint"}
    _create(pg_dsn, "public.lenient", overrides)
    with psycopg.connect(pg_dsn) as conn:
        types = column_types(conn, "public.lenient")
    assert binary_encoder(_batches()[0].schema, types) is None
    assert _write(pg_dsn, "public.lenient") == 6
    _assert_rows(_stored(pg_dsn, "public.lenient"), _expected())


def test_binary_copy_is_refused_for_every_type_whose_receive_function_reads_another_payload(
    pg_dsn: str,
) -> None:
    schema = pa.schema([("v", pa.int64())])
    for target in ("int4", "numeric", "text", "jsonb", "float8"):
        assert binary_encoder(schema, {"v": target}) is None, target
    assert binary_encoder(schema, {"v": "int8"}) is not None
    text = pa.schema([("v", pa.string())])
    assert binary_encoder(text, {"v": "varchar"}) is not None
    assert binary_encoder(text, {"v": "jsonb"}) is None
    assert binary_encoder(text, {}) is None  # a column the table does not have


def test_dead_letters_are_split_off_and_a_batch_without_any_passes_whole() -> None:
    writer = PostgresWriter(dsn="postgresql://unused", table="eo.dead_letters", columns=("raw",))
    dead = DeadLetters(writer, "p", 3)
    clean = pa.RecordBatch.from_pydict(
        {
            "v": [1, 2],
            DL_RAW: pa.array([None, None], pa.string()),
            DL_REASON: pa.array([None, None], pa.string()),
        }
    )
    mixed = pa.RecordBatch.from_pydict(
        {"v": [3, None, 5], DL_RAW: [None, "{bad\x00", None], DL_REASON: [None, "no parse", None]}
    )
    out = list(split_dead_letters([clean, mixed], ("v",), dead))
    assert [b.schema.names for b in out] == [["v"], ["v"]]
    assert [b.column(0).to_pylist() for b in out] == [[1, 2], [3, 5]]
    assert dead.rows == [("p", 3, "{bad\\u0000", "no parse")]
    # Another sink's tasks (no dead-letter writer) drop them and keep the same rows.
    again = list(split_dead_letters([clean, mixed], ("v",), None))
    assert [b.column(0).to_pylist() for b in again] == [[1, 2], [3, 5]]
