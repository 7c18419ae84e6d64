"""Arrow record batches into a writer transaction, without a Python object per value.

When every column's Arrow type has a PostgreSQL binary form that the target column's type
receives as is (``BINARY_TARGETS``: int64 into bigint, utf8 into text, timestamp into
timestamp(tz), ...), ``pgpq`` (Rust) encodes each record batch for ``COPY ... (FORMAT binary)``:
the writer formats no text and the server parses none, which on the bench's 1,000,000-row
batches cut the write from 2.8 s to 2.0 s on 2 cores (bench/README.md). Binary COPY has no
leniency (an int64 cannot land in an integer column), so the target table's column types are
read inside the writer's transaction and any other pairing falls back to CSV.

CSV: Arrow's C++ CSV writer turns each record batch into CSV that ``COPY ... (FORMAT csv)``
parses into whatever the column's type is. Quoting every non-null value and leaving NULLs
unquoted and empty keeps NULL and the empty string apart; timestamps with a zone are written
with their offset (``...Z``), so PostgreSQL stores the same instant whatever its ``TimeZone``,
and zone-less ones (``TIMESTAMP_NTZ``) keep their wall time. An upsert feeds its staging table
(the target's written columns, same types) the same way. Types CSV cannot carry (binary,
nested) go through Python rows instead, with timestamps as the same ISO text.

A batch may carry dead letters beside its rows (columns ``_eo_dl_raw`` and ``_eo_dl_reason``,
see ``runtime.one_pass``): rows with a reason are split off in Arrow and, for the task that
owns them, copied into the dead-letter table inside the same transaction.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import pgpq
import psycopg
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
import pyarrow.csv as pa_csv  # type: ignore[import-untyped]
from psycopg import sql

from eo_jobs.sinks.postgres.kept import KEPT_MEMORY_BYTES, KeptBatches
from eo_jobs.sinks.postgres.refusals import (
    Refusal,
    RefusedRecordError,
    ensure_dead_letter_table,
    is_refusal,
    isolate,
    record_json,
)
from eo_jobs.sinks.postgres.writer import (
    Feed,
    PostgresWriter,
    rows_feed,
    storable_text,
    table_identifier,
)

CSV_WRITE = pa_csv.WriteOptions(include_header=False, quoting_style="all_valid")
BINARY_TARGETS: dict[str, frozenset[str]] = {
    "BOOL": frozenset({"bool"}),
    "INT2": frozenset({"int2"}),
    "INT4": frozenset({"int4"}),
    "INT8": frozenset({"int8"}),
    "FLOAT4": frozenset({"float4"}),
    "FLOAT8": frozenset({"float8"}),
    "NUMERIC": frozenset({"numeric"}),
    "TEXT": frozenset({"text", "varchar"}),
    "DATE": frozenset({"date"}),
    # One wire form for both: microseconds since 2000-01-01. An Arrow instant (Spark
    # TIMESTAMP) is UTC, so a timestamptz gets the instant and a timestamp its UTC wall time;
    # a wall time (TIMESTAMP_NTZ) lands as itself; the same values CSV gives with TimeZone UTC.
    "TIMESTAMP": frozenset({"timestamp", "timestamptz"}),
}
"""pgpq's PostgreSQL type (its ``ddl()``) -> target column types (``pg_type.typname``) whose
binary receive function reads that payload exactly; anything else goes through CSV."""
DL_RAW = "_eo_dl_raw"
DL_REASON = "_eo_dl_reason"


W = TypeVar("W")


@dataclass
class DeadLetters(Generic[W]):
    """Where a task's dead letters go (the dead-letter table, in the sink's own database,
    written by ``writer``: a ``PostgresWriter`` here, the MySQL kind's own there)."""

    writer: W
    pipeline: str
    batch_id: int
    rows: list[tuple[Any, ...]] = field(default_factory=list)

    def take(self, batch: Any) -> None:
        """Keep the dead letters of one record batch (raw text and reason, NUL escaped).

        The raw text is the record's bytes as the source gave them (Kafka's value, a JSON
        line Jackson could not read), not always UTF-8: it is read as bytes and decoded with
        replacement, as the JVM writer does, so that a Latin-1 line is a dead letter too
        rather than a task that fails on every attempt.
        """
        raws = _texts(batch.column(DL_RAW))
        reasons = _texts(batch.column(DL_REASON))
        for raw, reason in zip(raws, reasons, strict=True):
            self.add(raw, reason)

    def add(self, raw: str | None, reason: str | None) -> None:
        """Keep one dead letter."""
        self.rows.append((self.pipeline, self.batch_id, storable_text(raw), storable_text(reason)))


def _texts(column: Any) -> list[str | None]:
    """A string column's values, bytes that are not UTF-8 replaced (U+FFFD)."""
    raw = column.cast(pa.large_binary()).to_pylist()
    return [None if v is None else bytes(v).decode("utf-8", errors="replace") for v in raw]


def split_dead_letters(
    batches: Iterable[Any], columns: tuple[str, ...], dead: DeadLetters[Any] | None
) -> Iterator[Any]:
    """The record batches without their dead letters (handed to ``dead`` when given)."""
    for batch in batches:
        if DL_REASON not in batch.schema.names:
            yield batch
            continue
        reasons = batch.column(DL_REASON)
        if reasons.null_count == len(reasons):
            # The common case: no dead letter, so no filter (which would copy every column).
            yield batch.select(list(columns))
            continue
        bad = pc.is_valid(reasons)
        if dead is not None:
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


COLUMN_TYPES_SQL = (
    "SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
    "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped"
)
"""``(column, pg_type.typname)`` of a table given as ``regclass`` text."""


def column_types(conn: psycopg.Connection[Any], table: str) -> dict[str, str]:
    """``{column: pg_type.typname}`` of ``table`` (``schema.table``) as the server sees it now."""
    rows = conn.execute(COLUMN_TYPES_SQL, (table_identifier(table).as_string(conn),)).fetchall()
    return {str(name): str(kind) for name, kind in rows}


def binary_encoder(schema: Any, targets: dict[str, str]) -> Any | None:
    """A pgpq encoder for ``schema`` if every column lands in a type that reads it (else None)."""
    try:
        encoder = pgpq.ArrowToPostgresBinaryEncoder(schema)
        columns = encoder.schema().columns
    except Exception:  # a type pgpq cannot encode: CSV can
        return None
    for column in columns:
        accepted = BINARY_TARGETS.get(str(column.data_type.ddl()), frozenset())
        if targets.get(column.name) not in accepted:
            return None
    return encoder


def copy_csv(copy: Any, batches: Iterable[Any]) -> int:
    """Every record batch into an open ``COPY (FORMAT csv)``; rows copied."""
    count = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        buffer = io.BytesIO()
        pa_csv.write_csv(batch, buffer, CSV_WRITE)
        copy.write(buffer.getbuffer())
        count += batch.num_rows
    return count


def copy_binary(copy: Any, encoder: Any, batches: Iterable[Any]) -> int:
    """Every record batch, encoded by ``encoder``, into an open ``COPY (FORMAT binary)``."""
    count = 0
    copy.write(encoder.write_header())
    for batch in batches:
        if batch.num_rows == 0:
            continue
        copy.write(encoder.write_batch(batch))
        count += batch.num_rows
    copy.write(encoder.finish())
    return count


def arrow_feed(table: str, first: Any, rest: Iterable[Any]) -> Feed:
    """A COPY feed of record batches (``first`` then ``rest``): binary or CSV (see the module).

    It is given the statement without options and adds the format it chose; ``table`` is the
    target whose column types decide (an upsert's staging table has its columns' types).
    """

    def feed(conn: psycopg.Connection[Any], statement: sql.Composed) -> int:
        encoder = binary_encoder(first.schema, column_types(conn, table))
        batches = itertools.chain([first], rest)
        form = "binary" if encoder is not None else "csv"
        with conn.cursor() as cur, cur.copy(statement + sql.SQL(f" (FORMAT {form})")) as copy:
            if encoder is not None:
                return copy_binary(copy, encoder, batches)
            return copy_csv(copy, batches)

    return feed


@dataclass
class Refused:
    """What a task does with a record its table refuses (``refusals``): keep it as a dead
    letter in ``letters``, or, when ``letters`` is None, fail naming ``batch_id``."""

    batch_id: int
    letters: DeadLetters[PostgresWriter] | None
    kept_memory_bytes: int = KEPT_MEMORY_BYTES
    """How much of the task's rows stay in memory for the slow path (``kept``)."""


def batches_feed(table: str, first: Any, rest: Iterable[Any]) -> Feed:
    """The COPY feed of ``first`` then ``rest`` (read as the COPY goes): Arrow (binary or CSV)
    when the schema allows, else Python rows."""
    if csv_writable(first.schema):
        return arrow_feed(table, first, rest)
    return rows_feed(python_rows(itertools.chain([first], rest)))


def arrow_body(
    writer: PostgresWriter,
    batches: Iterable[Any],
    dead: DeadLetters[PostgresWriter] | None = None,
    refused: Refused | None = None,
) -> Callable[[psycopg.Connection[Any]], int]:
    """The transaction body that writes ``batches`` through ``writer`` (see the module).

    It returns the sink's row count; ``dead``'s rows are copied after the sink's, in the same
    transaction. A write the table refuses (``refusals.is_refusal``) fails as it is without
    ``refused``; with it, it fails naming the batch, or its rows are written again in pieces
    and the refused ones join ``refused.letters`` (for that the record batches are kept, as
    Spark handed them over, until the task's transaction ends).
    """
    kept = KeptBatches(refused.kept_memory_bytes if refused is not None else KEPT_MEMORY_BYTES)
    stream = split_dead_letters(batches, writer.columns, dead)
    if refused is not None and refused.letters is not None:
        stream = kept.keeping(stream)
    first = next(stream, None)
    if first is None:
        rows = writer.rows_body(())
    else:
        rows = writer.body(batches_feed(writer.table, first, stream))

    def run(conn: psycopg.Connection[Any]) -> int:
        try:
            count = rows(conn)
        except psycopg.Error as exc:
            if refused is None or not is_refusal(exc):
                raise
            if refused.letters is None:
                failure = Refusal.of(exc).failure(writer.table, refused.batch_id)
                raise RefusedRecordError(failure) from exc
            for _ in stream:  # the rest of the task's rows (and dead letters) are kept
                pass
            count = _isolating(conn, writer, kept.table(), refused.letters)
        finally:
            kept.close()
        if dead is not None and dead.rows:
            dead.writer.rows_body(dead.rows)(conn)
        return count

    return run


def _isolating(
    conn: psycopg.Connection[Any],
    writer: PostgresWriter,
    table: Any,
    letters: DeadLetters[PostgresWriter],
) -> int:
    """The slow path (``refusals``): the transaction again, the rows in pieces; rows written.

    Nothing precedes the rows in the task's transaction, so it is rolled back as a whole and
    begun again; the refused rows are written to ``letters``' table at the end.
    """
    conn.rollback()
    writer.begin(conn)
    names = list(table.column_names)
    pieces = writer.pieces(conn)

    def write(lo: int, hi: int) -> int:
        piece = table.slice(lo, hi - lo).to_batches()
        return pieces.write(batches_feed(writer.table, piece[0], piece[1:]))

    refused: list[tuple[int, Refusal]] = []
    count = isolate(conn, table.num_rows, write, lambda i, r: refused.append((i, r)))
    pieces.close()
    if refused:
        for index, refusal in refused:
            raw = record_json(names, _row_values(table, index))
            letters.add(raw, refusal.reason(writer.table))
        ensure_dead_letter_table(conn, letters.writer.conninfo(), letters.writer.table)
        letters.writer.rows_body(letters.rows)(conn)
    return count


def _row_values(table: Any, index: int) -> list[Any]:
    """Row ``index`` of ``table`` as Python values: text that is not UTF-8 as bytes, and a date
    or time Python cannot hold (before year 1: PostgreSQL may have refused it for that) as
    Arrow's text of it."""
    values = []
    for column in table.columns:
        scalar = column[index]
        try:
            values.append(scalar.as_py())
        except UnicodeDecodeError:
            values.append(scalar.cast(pa.large_binary()).as_py())
        except (OverflowError, ValueError):
            values.append(scalar.cast(pa.string()).as_py())
    return values
