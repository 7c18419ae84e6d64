"""The driver's start-up check of its sinks: every problem of every sink, named, before a batch."""

from __future__ import annotations

import psycopg
import pytest
from tests.support.pipelines import document

from eo_jobs.protocol.errors import EXIT_SINK_CONTRACT
from eo_jobs.runtime.main import StartupError, check_sinks
from eo_jobs.spec import parse_pipeline

TOTALS = {
    "name": "daily",
    "transform": {"sql": "SELECT id, id AS n FROM source"},
    "postgres": {
        "dsn": {"env": "PG"},
        "table": "public.totals",
        "mode": "accumulate",
        "keyColumns": ["id"],
        "addColumns": ["volume"],
    },
}


def test_an_accumulate_sink_whose_rows_are_not_its_keys_and_addends_is_refused_naming_both(
    pg_dsn: str,
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.t (id bigint)")
        conn.execute("CREATE TABLE public.totals (id bigint PRIMARY KEY, volume real, n bigint)")
    pipeline = parse_pipeline(
        document(
            sinks=[
                {"name": "ledger", "postgres": {"dsn": {"env": "PG"}, "table": "public.t"}},
                TOTALS,
            ]
        )
    )
    schemas = {"ledger": [("id", "bigint")], "daily": [("id", "bigint"), ("n", "bigint")]}

    with pytest.raises(StartupError) as refused:
        check_sinks(pipeline, {"ledger": pg_dsn, "daily": pg_dsn}, schemas)

    assert refused.value.code == EXIT_SINK_CONTRACT
    message = str(refused.value)
    assert (
        "sink daily: [accumulate-columns] mode accumulate writes keyColumns and addColumns only: "
        "missing volume; change spec.sinks[1].transform.sql" in message
    )
    assert "also has n" in message
    assert "sink daily: [inexact-sum] accumulate adds to public.totals.volume, of type real" in (
        message
    )
    assert "sink ledger" not in message


def _ledger(**postgres: object) -> dict[str, object]:
    return {
        "name": "ledger",
        "postgres": {"dsn": {"env": "PG"}, "table": "public.ledger", **postgres},
    }


def test_an_audit_column_the_rows_already_have_is_refused_naming_the_query_to_change(
    pg_dsn: str,
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.ledger (id bigint, eo_batch bigint)")
    pipeline = parse_pipeline(document(sinks=[_ledger(auditColumn="eo_batch")]))
    schemas = {"ledger": [("id", "bigint"), ("eo_batch", "bigint")]}

    with pytest.raises(StartupError) as refused:
        check_sinks(pipeline, {"ledger": pg_dsn}, schemas)

    assert (
        "sink ledger: [audit-column] the sink's rows already have a column eo_batch, and eo "
        "fills auditColumn with the batch id itself: drop or rename eo_batch in "
        "spec.transform.sql" in str(refused.value)
    )


@pytest.mark.parametrize(
    ("ddl", "named"),
    [
        ("CREATE TABLE public.ledger (id bigint)", "ADD COLUMN eo_batch bigint"),
        (
            "CREATE TABLE public.ledger (id bigint, eo_batch text)",
            "ALTER COLUMN eo_batch TYPE bigint",
        ),
        (
            "CREATE TABLE public.ledger (id bigint, eo_batch smallint)",
            "ALTER COLUMN eo_batch TYPE bigint",
        ),
    ],
    ids=["missing", "text", "smallint"],
)
def test_a_table_that_cannot_hold_the_audit_column_is_refused_naming_it(
    pg_dsn: str, ddl: str, named: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(ddl)
    pipeline = parse_pipeline(document(sinks=[_ledger(auditColumn="eo_batch")]))

    with pytest.raises(StartupError) as refused:
        check_sinks(pipeline, {"ledger": pg_dsn}, {"ledger": [("id", "bigint")]})

    problems = [line for line in str(refused.value).splitlines() if "sink ledger" in line]
    assert len(problems) == 1, problems
    assert "sink ledger: [audit-column]" in problems[0] and named in problems[0], problems


def test_a_table_with_a_bigint_audit_column_passes(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.ledger (id bigint, eo_batch bigint)")
    pipeline = parse_pipeline(document(sinks=[_ledger(auditColumn="eo_batch")]))

    check_sinks(pipeline, {"ledger": pg_dsn}, {"ledger": [("id", "bigint")]})
