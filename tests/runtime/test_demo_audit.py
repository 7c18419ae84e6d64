"""The demo's audit against a real PostgreSQL: exact sinks pass, a doubled total is caught."""

from __future__ import annotations

import psycopg
import pytest

from eo_jobs.protocol.control import ControlStore
from eo_jobs.runtime.demo import Source, audit, create_tables, day_of, print_table


def _source() -> Source:
    truth = Source(lines=6)
    for order_id in range(6):
        truth.valid[order_id] = (f"merchant-{order_id % 2}", 100 + order_id)
    return truth


def _fill(dsn: str, truth: Source) -> None:
    create_tables(dsn)
    ControlStore(dsn).ensure_schema()
    rows = [(oid, m, a, "EUR", f"{day_of(oid)}T10:00:00Z") for oid, (m, a) in truth.valid.items()]
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO public.ledger VALUES (%s, %s, %s, %s, %s)", rows)
        conn.execute("CREATE TABLE public.ledger_dead_letter (raw text, reason text)")
        conn.execute(
            "INSERT INTO public.merchant_daily_volume SELECT merchant, "
            "(event_time AT TIME ZONE 'UTC')::date, sum(amount_cents), count(*) "
            "FROM public.ledger GROUP BY 1, 2"
        )


def test_totals_equal_to_the_ledger_and_the_source_pass_and_are_said(
    pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    truth = _source()
    _fill(pg_dsn, truth)

    table, ok = audit(pg_dsn, truth, [1])
    print_table(table, [1], ok)

    assert ok
    assert dict(table)["merchant-day totals"] == 6
    out = capsys.readouterr().out
    assert "totals match the ledger: 6 of 6 keys" in out and "RESULT: exactly once" in out


def test_a_total_a_replay_added_twice_fails_the_audit(
    pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    truth = _source()
    _fill(pg_dsn, truth)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE public.merchant_daily_volume SET volume_cents = 2 * volume_cents, "
            "payments = 2 * payments WHERE day = %s",
            (day_of(0),),
        )

    table, ok = audit(pg_dsn, truth, [1])
    print_table(table, [1], ok)

    assert not ok
    assert dict(table)["totals unlike the ledger's"] == 1
    assert dict(table)["totals unlike the source's"] == 1
    assert "totals match the ledger: 5 of 6 keys" in capsys.readouterr().out
