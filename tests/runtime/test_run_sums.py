"""Sum columns through a real driver: a batch whose records the table refused records no sum
for that sink (its rows went to dead letters, so no figure could match the table), every other
batch records the exact sum of what it stored; and a sum column of an inexact type is refused
at start-up."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
from tests.runtime import harness
from tests.support.pipelines import document

from eo_jobs.runtime.batch_sums import sum_column_problems
from eo_jobs.spec import parse_pipeline

pytestmark = pytest.mark.spark

REFUSES_LARGE = (
    "CREATE TABLE public.orders (order_id bigint NOT NULL, merchant text, "
    "amount_cents bigint CHECK (amount_cents < 5000), batch bigint)"
)
WITH_BATCH = (
    "SELECT order_id, merchant, amount_cents, CAST(order_id / 30 AS BIGINT) AS batch FROM source"
)


def test_a_batch_with_refused_records_records_no_sum_and_the_others_their_exact_sums(
    tmp_path: Path, pg_dsn: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(REFUSES_LARGE)
    # One file per batch, 30 records each: the transform's "batch" column is the batch id.
    truth = harness.write_files(tmp_path / "in", files=6, per_file=30, malformed_every=10**9)
    spec = harness.files_pipeline(
        tmp_path, transform=WITH_BATCH, per_trigger=1, orders_options=", sumColumns: [amount_cents]"
    )
    code, out = harness.run(spec, 1, pg_dsn)
    assert code == 0, out

    with psycopg.connect(pg_dsn) as conn:
        recorded = dict(conn.execute("SELECT batch_id, sums FROM eo.decisions").fetchall())
        stored = dict(
            conn.execute("SELECT batch, sum(amount_cents) FROM public.orders GROUP BY 1").fetchall()
        )
        refused = {r[0] for r in conn.execute("SELECT batch_id FROM public.orders_dead_letter")}
    large = {oid // 30 for oid, amount in truth.valid.items() if amount >= 5000}
    assert refused == large and 0 < len(large) < 6  # the data refuses some batches' records
    for batch, sums in recorded.items():
        if batch in refused:
            assert sums == {"orders": None}, (batch, sums)
        else:
            assert sums == {"orders": {"amount_cents": str(stored[batch])}}, (batch, sums)
            expected = sum(a for oid, a in truth.valid.items() if oid // 30 == batch)
            assert Decimal(stored[batch]) == expected


def test_a_sum_column_the_sink_does_not_write_or_of_an_inexact_type_is_named_with_the_fix() -> None:
    doc = document()
    doc["spec"]["sinks"][0]["postgres"]["sumColumns"] = ["amount", "ratio", "cents", "missing"]
    sink = parse_pipeline(doc).spec.sinks[0]
    schema = [("amount", "decimal(18,2)"), ("ratio", "double"), ("cents", "bigint")]

    problems = sum_column_problems(sink, schema)

    assert len(problems) == 2, problems
    assert "sumColumns ratio is of Spark type double" in problems[0]
    assert "CAST(ratio AS DECIMAL(18, 2))" in problems[0]
    assert "sumColumns names missing, which the sink does not write" in problems[1]
