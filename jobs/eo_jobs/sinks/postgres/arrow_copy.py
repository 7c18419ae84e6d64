"""Arrow record batches into a writer transaction, without a Python object per value.

For append, Arrow's C++ CSV writer turns each record batch into CSV that PostgreSQL's
``COPY ... (FORMAT csv)`` reads directly. Quoting every non-null value and leaving NULLs
unquoted and empty keeps NULL and the empty string apart; timestamps with a zone are written
with their offset (``...Z``), so PostgreSQL stores the same instant whatever its ``TimeZone``,
and zone-less ones (``TIMESTAMP_NTZ``) keep their wall time. Types CSV cannot carry (binary,
nested) and upserts (deduplicated by key in Python first) go through Python rows instead, with
timestamps as the same ISO text.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import psycopg
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.csv as pa_csv  # type: ignore[import-untyped]

from eo_jobs.sinks.postgres.writer import PostgresWriter

CSV_WRITE = pa_csv.WriteOptions(include_header=False, quoting_style="all_valid")


def _csv_type(kind: Any) -> bool:
    """Whether Arrow's CSV writer renders ``kind`` as text PostgreSQL parses back exactly."""
    t = pa.types
    return bool(
        t.is_integer(kind)
        or t.is_floating(kind)
        or t.is_decimal(kind)
        or t.is_boolean(kind)
        or t.is_string(kind)
        or t.is_large_string(kind)
        or t.is_date(kind)
        or t.is_timestamp(kind)
        or t.is_null(kind)
    )


def csv_writable(schema: Any) -> bool:
    """Whether every column of ``schema`` can go through CSV."""
    return all(_csv_type(field.type) for field in schema)


def _python_values(column: Any) -> list[Any]:
    """One column as Python values; timestamps as ISO text with their offset (see module)."""
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.string())
    return list(column.to_pylist())


def python_rows(batches: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """Row tuples of every record batch, converted column by column."""
    for batch in batches:
        yield from zip(*(_python_values(column) for column in batch.columns), strict=True)


def _copy_csv(writer: PostgresWriter, conn: psycopg.Connection[Any], batches: Iterable[Any]) -> int:
    count = 0
    with conn.cursor() as cur, cur.copy(writer.copy_statement(" (FORMAT csv)")) as copy:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            buffer = io.BytesIO()
            pa_csv.write_csv(batch, buffer, CSV_WRITE)
            copy.write(buffer.getbuffer())
            count += batch.num_rows
    return count


def arrow_body(
    writer: PostgresWriter, batches: Iterable[Any]
) -> Callable[[psycopg.Connection[Any]], int]:
    """The transaction body that writes ``batches`` through ``writer`` (see the module)."""
    stream = iter(batches)
    first = next(stream, None)
    if first is None:
        return writer.rows_body(())
    everything = itertools.chain([first], stream)
    if writer.mode == "append" and csv_writable(first.schema):

        def body(conn: psycopg.Connection[Any]) -> int:
            return _copy_csv(writer, conn, everything)

        return body
    return writer.rows_body(python_rows(everything))
