"""A sink that cannot honour exactly-once is refused with the reason and the fix."""

from __future__ import annotations

import uuid

import psycopg

from eo_jobs.pgserver import temporary_server
from eo_jobs.sinks.postgres.contract import check_contract


def _codes(dsn: str, table: str, **kwargs: object) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [p.code for p in check_contract(conn, table, **kwargs)]  # type: ignore[arg-type]


def test_a_healthy_logged_table_has_no_problems(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.ok (id bigint PRIMARY KEY, v text)")
    assert _codes(pg_dsn, "public.ok", columns=["id", "v"], mode="upsert", key_columns=["id"]) == []


def test_an_unlogged_table_is_refused(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE UNLOGGED TABLE public.fast (id bigint)")
        problems = check_contract(conn, "public.fast")
    assert [p.code for p in problems] == ["unlogged-table"]
    assert "SET LOGGED" in problems[0].message


def test_a_missing_table_and_missing_columns_are_named(pg_dsn: str) -> None:
    assert _codes(pg_dsn, "public.nope") == ["missing-table"]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.t (id bigint)")
        problems = check_contract(conn, "public.t", columns=["id", "amount"])
    assert [p.code for p in problems] == ["missing-columns"]
    assert "amount" in problems[0].message


def test_upsert_without_a_unique_index_on_the_keys_is_refused(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.u (id bigint, other bigint UNIQUE)")
    assert _codes(pg_dsn, "public.u", mode="upsert", key_columns=["id"]) == ["no-unique-key"]


def test_a_user_without_insert_privilege_is_told_what_to_grant(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.locked (id bigint)")
        conn.execute("DROP ROLE IF EXISTS reader")
        conn.execute("CREATE ROLE reader LOGIN")
        conn.execute("GRANT USAGE ON SCHEMA public TO reader")
    reader_dsn = pg_dsn.replace("postgres@", "reader@", 1)
    with psycopg.connect(reader_dsn, autocommit=True) as conn:
        problems = check_contract(conn, "public.locked")
    messages = " ".join(p.message for p in problems)
    assert "lacks INSERT on public.locked" in messages
    assert "GRANT INSERT ON public.locked TO reader" in messages


def test_a_server_with_max_prepared_transactions_zero_is_refused() -> None:
    with (
        temporary_server(settings={"max_prepared_transactions": "0"}) as server,
        psycopg.connect(server.dsn(), autocommit=True) as conn,
    ):
        conn.execute("CREATE TABLE public.t (id bigint)")
        problems = check_contract(conn, "public.t")
    assert [p.code for p in problems] == ["max_prepared_transactions"]
    assert "max_prepared_transactions is 0" in problems[0].message


def test_accumulate_needs_a_unique_key_and_exact_sum_columns(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.sums (k text, n bigint, v double precision)")
        problems = check_contract(
            conn,
            "public.sums",
            columns=["k", "n", "v"],
            mode="accumulate",
            key_columns=["k"],
            add_columns=["n", "v"],
        )
    assert [p.code for p in problems] == ["no-unique-key", "inexact-sum"]
    assert "accumulate needs a unique index on exactly (k)" in problems[0].message
    assert "public.sums.v, of type double precision" in problems[1].message
    assert "TYPE numeric" in problems[1].message


def test_a_sum_column_of_an_inexact_type_is_refused_with_the_fix(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.ledger (id bigint, cents bigint, rate real)")
        problems = check_contract(
            conn, "public.ledger", columns=["id", "cents", "rate"], sum_columns=["cents", "rate"]
        )
    assert [p.code for p in problems] == ["inexact-sum"]
    assert "sumColumns sums public.ledger.rate, of type real" in problems[0].message
    assert "ALTER COLUMN rate TYPE numeric" in problems[0].message


def test_accumulate_needs_update_as_upsert_does(pg_dsn: str) -> None:
    adder = f"adder_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.sums (k text PRIMARY KEY, n numeric)")
        conn.execute(f"CREATE ROLE {adder} LOGIN")  # roles are the server's: a name of its own
        conn.execute(f"GRANT INSERT ON public.sums TO {adder}")
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, user=adder)
    with psycopg.connect(dsn, autocommit=True) as conn:
        problems = check_contract(
            conn, "public.sums", mode="accumulate", key_columns=["k"], add_columns=["n"]
        )
    fixes = [p.message.split("; ")[-1] for p in problems]
    assert f"GRANT UPDATE ON public.sums TO {adder}" in fixes
