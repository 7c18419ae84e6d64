"""The benchmark's input and its audit: order events whose every field follows from its id.

Deriving each field from ``order_id`` makes the ground truth a formula instead of a copy of the
data: the audit is one SQL query (rows, duplicates, missing ids, wrong values) however large the
data set, and the same formula is written once in Python (:func:`event`) and once in SQL
(:data:`WRONG_VALUE`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

SCHEMA_DDL = (
    "order_id BIGINT, customer_id BIGINT, merchant STRING, amount_cents BIGINT, "
    "currency STRING, created_at TIMESTAMP"
)
"""Spark DDL of one event (the declared source schema of every variant)."""
COLUMNS = ("order_id", "customer_id", "merchant", "amount_cents", "currency", "created_at")
CURRENCIES = ("EUR", "USD", "GBP")
EPOCH_SECONDS = 1_767_225_600
"""2026-01-01T00:00:00Z: ``created_at`` of order 0; order N is N seconds later."""

TABLE_DDL = sql.SQL(
    "CREATE TABLE {} (order_id bigint NOT NULL{key}, customer_id bigint, merchant text, "
    "amount_cents bigint, currency text, created_at timestamptz)"
)
"""The sink table: no key for append, so that duplicates land and can be counted; upsert
(``ON CONFLICT``) needs one, and there a duplicate cannot land, so only gaps and wrong values
can show up in its audit."""
WRONG_VALUE = (
    "customer_id IS DISTINCT FROM mod(order_id * 7919, 50000)"
    " OR merchant IS DISTINCT FROM 'm' || mod(order_id, 50)"
    " OR amount_cents IS DISTINCT FROM 100 + mod(order_id * 37, 10000)"
    " OR currency IS DISTINCT FROM (ARRAY['EUR', 'USD', 'GBP'])[mod(order_id, 3) + 1]"
    " OR created_at IS DISTINCT FROM to_timestamp(%(epoch)s + order_id)"
)
"""SQL predicate: a row whose fields differ from what :func:`event` generated for its id."""


def event(order_id: int) -> dict[str, Any]:
    """The one event with this id (see :data:`WRONG_VALUE` for the same rules in SQL)."""
    created = datetime.fromtimestamp(EPOCH_SECONDS + order_id, UTC)
    return {
        "order_id": order_id,
        "customer_id": order_id * 7919 % 50_000,
        "merchant": f"m{order_id % 50}",
        "amount_cents": 100 + order_id * 37 % 10_000,
        "currency": CURRENCIES[order_id % 3],
        "created_at": created.isoformat().replace("+00:00", "Z"),
    }


def _columns(first: int, count: int) -> dict[str, list[Any]]:
    """Orders ``first .. first+count-1`` column by column, by :func:`event`'s rules, vectorized.

    A million events through :func:`event` and ``json.dumps`` take ~6 s; the bench writes up
    to a few million per run, so the same formula is computed with numpy (the audit checks the
    result against the SQL version of it, so a slip here cannot go unnoticed).
    """
    ids = np.arange(first, first + count, dtype=np.int64)
    stamps = np.datetime_as_string((ids + EPOCH_SECONDS).astype("datetime64[s]"), unit="s")
    return {
        "order_id": ids.tolist(),
        "customer_id": (ids * 7919 % 50_000).tolist(),
        "merchant": [f"m{m}" for m in (ids % 50).tolist()],
        "amount_cents": (100 + ids * 37 % 10_000).tolist(),
        "currency": [CURRENCIES[c] for c in (ids % 3).tolist()],
        "created_at": [f"{t}Z" for t in stamps.tolist()],
    }


def json_lines(first: int, count: int) -> str:
    """The JSON lines of orders ``first ..`` (byte for byte what ``json.dumps(event(i))`` gives)."""
    c = _columns(first, count)
    return "".join(
        f'{{"order_id": {o}, "customer_id": {cu}, "merchant": "{m}", "amount_cents": {a}, '
        f'"currency": "{cur}", "created_at": "{t}"}}\n'
        for o, cu, m, a, cur, t in zip(
            c["order_id"],
            c["customer_id"],
            c["merchant"],
            c["amount_cents"],
            c["currency"],
            c["created_at"],
            strict=True,
        )
    )


def csv_lines(first: int, count: int) -> str:
    """The same orders as CSV in :data:`COLUMNS` order (what ``COPY ... (FORMAT csv)`` reads)."""
    c = _columns(first, count)
    return "".join(
        f"{o},{cu},{m},{a},{cur},{t}\n"
        for o, cu, m, a, cur, t in zip(
            c["order_id"],
            c["customer_id"],
            c["merchant"],
            c["amount_cents"],
            c["currency"],
            c["created_at"],
            strict=True,
        )
    )


def write_events(folder: Path, events: int, files: int) -> None:
    """Orders ``0 .. events-1`` as JSON lines, spread evenly over ``files`` files."""
    folder.mkdir(parents=True, exist_ok=True)
    per_file, extra = divmod(events, files)
    order_id = 0
    for index in range(files):
        count = per_file + (1 if index < extra else 0)
        tmp = folder / f".part-{index:05d}.tmp"
        tmp.write_text(json_lines(order_id, count))
        order_id += count
        tmp.rename(folder / f"part-{index:05d}.json")


def link_events(source: Path, folder: Path, files: int) -> None:
    """``folder`` holds the first ``files`` files of ``source`` (hard links, no copy).

    Every batch size reads a prefix of one generated set, so orders ``0 .. N-1`` for each.
    """
    folder.mkdir(parents=True)
    for index in range(files):
        name = f"part-{index:05d}.json"
        os.link(source / name, folder / name)


def csv_chunks(first: int, count: int, chunk: int = 100_000) -> Iterator[bytes]:
    """CSV of orders ``first .. first+count-1`` in pieces of at most ``chunk`` rows."""
    for start in range(first, first + count, chunk):
        yield csv_lines(start, min(chunk, first + count - start)).encode()


def create_table(dsn: str, table: str, *, key: bool = False) -> None:
    """Create the (empty) sink table ``schema.table``; ``key``: ``order_id`` is its primary key."""
    schema, _, name = table.partition(".")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            TABLE_DDL.format(
                sql.Identifier(schema, name), key=sql.SQL(" PRIMARY KEY" if key else "")
            )
        )


@dataclass(frozen=True)
class Audit:
    """The sink table against the generated events."""

    rows: int
    duplicates: int
    missing: int
    unexpected: int
    wrong: int
    in_doubt: int
    """Prepared transactions left in the database (a finished exactly-once run leaves none)."""
    totals_wrong: int = 0
    """Running totals (the accumulate variant's second sink) unlike the table's own sums."""
    sums_wrong: int = 0
    """Batches whose recorded sums are missing, plus 1 if they do not add up to the table's sum
    (the sum-columns variant)."""

    @property
    def exact(self) -> bool:
        """Every event exactly once, with its values, and nothing left prepared."""
        return not any(
            (
                self.duplicates,
                self.missing,
                self.unexpected,
                self.wrong,
                self.in_doubt,
                self.totals_wrong,
                self.sums_wrong,
            )
        )


def audit(dsn: str, table: str, events: int) -> Audit:
    """Count rows, duplicates, missing and unexpected ids and wrong values in one pass."""
    schema, _, name = table.partition(".")
    query = sql.SQL(
        "SELECT count(*), count(*) - count(DISTINCT order_id),"
        " %(events)s - count(DISTINCT order_id) FILTER (WHERE order_id BETWEEN 0 AND %(last)s),"
        " count(*) FILTER (WHERE order_id IS NULL OR order_id NOT BETWEEN 0 AND %(last)s),"
        " count(*) FILTER (WHERE {wrong}),"
        " (SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database())"
        " FROM {table}"
    ).format(wrong=sql.SQL(WRONG_VALUE), table=sql.Identifier(schema, name))
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            query, {"events": events, "last": events - 1, "epoch": EPOCH_SECONDS}
        ).fetchone()
    assert row is not None
    return Audit(*(int(value) for value in row))


TOTALS_DDL = sql.SQL(
    "CREATE TABLE {} (merchant text, day date, volume_cents numeric(20, 0) NOT NULL, "
    "payments bigint NOT NULL, PRIMARY KEY (merchant, day))"
)
TOTALS_WRONG = sql.SQL(
    "SELECT count(*) FROM {totals} t FULL JOIN (SELECT merchant, "
    "(created_at AT TIME ZONE 'UTC')::date AS day, sum(amount_cents) AS volume_cents, "
    "count(*) AS payments FROM {table} GROUP BY 1, 2) l USING (merchant, day) "
    "WHERE t.volume_cents IS DISTINCT FROM l.volume_cents "
    "OR t.payments IS DISTINCT FROM l.payments"
)
"""Merchant-days whose running total differs from the sink table's own sums: with the table
audited exact against the events, equal sums mean totals equal to the events'."""


def create_totals_table(dsn: str, table: str) -> None:
    """The accumulate variant's (empty) totals table."""
    schema, _, name = table.partition(".")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(TOTALS_DDL.format(sql.Identifier(schema, name)))


def totals_wrong(dsn: str, totals: str, table: str) -> int:
    """Merchant-days of ``totals`` unlike ``table``'s sums (``TOTALS_WRONG``)."""
    query = TOTALS_WRONG.format(
        totals=sql.Identifier(*totals.split(".", 1)), table=sql.Identifier(*table.split(".", 1))
    )
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query).fetchone()
    return int(row[0]) if row else -1


def sums_wrong(dsn: str, table: str, column: str = "amount_cents") -> int:
    """Decisions without a recorded sum of ``column`` for the sink ``orders``, plus 1 if the
    recorded sums do not add up to ``table``'s sum of it."""
    with psycopg.connect(dsn) as conn:
        recorded = [
            r[0]
            for r in conn.execute(
                "SELECT sums -> 'orders' ->> %s FROM eo.decisions", (column,)
            ).fetchall()
        ]
        stored = conn.execute(
            sql.SQL("SELECT coalesce(sum({}), 0) FROM {}").format(
                sql.Identifier(column), sql.Identifier(*table.split(".", 1))
            )
        ).fetchone()
    missing = sum(1 for r in recorded if r is None)
    total = sum(Decimal(r) for r in recorded if r is not None)
    return missing + int(stored is None or Decimal(stored[0]) != total)
