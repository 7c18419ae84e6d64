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
