"""The bench's audit of what a variant wrote: the table against the events, totals against it."""

from __future__ import annotations

from dataclasses import replace

import psycopg
from bench.variants import TOTALS_TABLE

from bench import data

TABLE = "public.orders"


def _ledger(dsn: str, events: int) -> None:
    data.create_table(dsn, TABLE)
    data.create_totals_table(dsn, TOTALS_TABLE)
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        conn.cursor() as cur,
        cur.copy(f"COPY {TABLE} FROM STDIN (FORMAT csv)") as copy,
    ):
        for chunk in data.csv_chunks(0, events):
            copy.write(chunk)


def test_totals_equal_to_the_table_s_sums_are_exact_and_each_wrong_day_is_counted(
    pg_dsn: str,
) -> None:
    _ledger(pg_dsn, 20_000)  # orders are a second apart: 20,000 of them span 2 days
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {TOTALS_TABLE} SELECT merchant, (created_at AT TIME ZONE 'UTC')::date, "
            f"sum(amount_cents), count(*) FROM {TABLE} GROUP BY 1, 2"
        )
    found = data.audit(pg_dsn, TABLE, 20_000)
    assert found.exact
    assert data.totals_wrong(pg_dsn, TOTALS_TABLE, TABLE) == 0

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        # A replay added one day's batch twice; another merchant-day never arrived.
        conn.execute(
            f"UPDATE {TOTALS_TABLE} SET volume_cents = volume_cents * 2 "
            "WHERE merchant = 'm1' AND day = '2026-01-01'"
        )
        conn.execute(f"DELETE FROM {TOTALS_TABLE} WHERE merchant = 'm2' AND day = '2026-01-01'")
    wrong = data.totals_wrong(pg_dsn, TOTALS_TABLE, TABLE)
    assert wrong == 2
    assert not replace(found, totals_wrong=wrong).exact
