"""Arrow record batches into a writer transaction, without a Python object per value.

For append, Arrow's C++ CSV writer turns each record batch into CSV that PostgreSQL's
``COPY ... (FORMAT csv)`` reads directly. Quoting every non-null value and leaving NULLs
unquoted and empty keeps NULL and the empty string apart; timestamps with a zone are written
with their offset (``...Z``), so PostgreSQL stores the same instant whatever its ``TimeZone``,
and zone-less ones (``TIMESTAMP_NTZ``) keep their wall time. An upsert feeds its staging table
the same way. Types CSV cannot carry (binary, nested) go through Python rows instead, with
timestamps as the same ISO text.

A batch may carry dead letters beside its rows (columns ``_eo_dl_raw`` and ``_eo_dl_reason``,
see ``runtime.one_pass``): rows with a reason are split off in Arrow and, for the task that
owns them, copied into the dead-letter table inside the same transaction.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
import pyarrow.csv as pa_csv  # type: ignore[import-untyped]
from psycopg import sql

from eo_jobs.sinks.postgres.writer import Feed, PostgresWriter, storable_text

CSV_WRITE = pa_csv.WriteOptions(include_header=False, quoting_style="all_valid")
DL_RAW = "_eo_dl_raw"
DL_REASON = "_eo_dl_reason"


@dataclass
class DeadLetters:
    """Where a task's dead letters go (the dead-letter table, in the sink's own database)."""

    writer: PostgresWriter
    pipeline: str
    batch_id: int
    rows: list[tuple[Any, ...]] = field(default_factory=list)

    def take(self, batch: Any) -> None:
        """Keep the dead letters of one record batch (raw text and reason, NUL escaped)."""
        raws = batch.column(DL_RAW).to_pylist()
        reasons = batch.column(DL_REASON).to_pylist()
        for raw, reason in zip(raws, reasons, strict=True):
            self.rows.append(
                (self.pipeline, self.batch_id, storable_text(raw), storable_text(reason))
            )


def split_dead_letters(
    batches: Iterable[Any], columns: tuple[str, ...], dead: DeadLetters | None
) -> Iterator[Any]:
    """The record batches without their dead letters (handed to ``dead`` when given)."""
    for batch in batches:
        if DL_REASON not in batch.schema.names:
            yield batch
            continue
        bad = pc.is_valid(batch.column(DL_REASON))
        if dead is not None and pc.any(bad).as_py():
            dead.take(batch.filter(bad))
        good = batch.filter(pc.invert(bad))
        yield good.select(list(columns))


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


def _csv_feed(batches: Iterable[Any]) -> Feed:
    """A COPY feed that writes every record batch as CSV (Arrow's C++ writer)."""

    def feed(conn: psycopg.Connection[Any], statement: sql.Composed) -> int:
        count = 0
        with conn.cursor() as cur, cur.copy(statement) as copy:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                buffer = io.BytesIO()
                pa_csv.write_csv(batch, buffer, CSV_WRITE)
                copy.write(buffer.getbuffer())
                count += batch.num_rows
        return count

    return feed


def arrow_body(
    writer: PostgresWriter, batches: Iterable[Any], dead: DeadLetters | None = None
) -> Callable[[psycopg.Connection[Any]], int]:
    """The transaction body that writes ``batches`` through ``writer`` (see the module).

    It returns the sink's row count; ``dead``'s rows are copied after the sink's, in the same
    transaction.
    """
    stream = split_dead_letters(batches, writer.columns, dead)
    first = next(stream, None)
    if first is None:
        rows = writer.rows_body(())
    elif csv_writable(first.schema):
        rows = writer.body(_csv_feed(itertools.chain([first], stream)), "(FORMAT csv)")
    else:
        rows = writer.rows_body(python_rows(itertools.chain([first], stream)))
    if dead is None:
        return rows

    def with_dead_letters(conn: psycopg.Connection[Any]) -> int:
        count = rows(conn)
        if dead.rows:
            dead.writer.rows_body(dead.rows)(conn)
        return count

    return with_dead_letters
