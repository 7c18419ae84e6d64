"""The benchmark's input and its audit: order events whose every field follows from its id.

Deriving each field from ``order_id`` makes the ground truth a formula instead of a copy of the
data: the audit is one SQL query (rows, duplicates, missing ids, wrong values) however large the
data set, and the same formula is written once in Python (:func:`event`) and once in SQL
(:data:`WRONG_VALUE`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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
    "CREATE TABLE {} (order_id bigint NOT NULL, customer_id bigint, merchant text, "
    "amount_cents bigint, currency text, created_at timestamptz)"
)
"""The sink table: no key, so that duplicates land and can be counted."""
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


def write_events(folder: Path, events: int, files: int) -> None:
    """Orders ``0 .. events-1`` as JSON lines, spread evenly over ``files`` files."""
    folder.mkdir(parents=True, exist_ok=True)
    per_file, extra = divmod(events, files)
    order_id = 0
    for index in range(files):
        count = per_file + (1 if index < extra else 0)
        lines = [json.dumps(event(i)) for i in range(order_id, order_id + count)]
        order_id += count
        tmp = folder / f".part-{index:05d}.tmp"
        tmp.write_text("".join(line + "\n" for line in lines))
        tmp.rename(folder / f"part-{index:05d}.json")


def create_table(dsn: str, table: str) -> None:
    """Create the (empty) sink table ``schema.table``."""
    schema, _, name = table.partition(".")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(TABLE_DDL.format(sql.Identifier(schema, name)))


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

    @property
    def exact(self) -> bool:
        """Every event exactly once, with its values, and nothing left prepared."""
        return not any((self.duplicates, self.missing, self.unexpected, self.wrong, self.in_doubt))


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
