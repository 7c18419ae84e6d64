"""``auditColumn``: eo writes each row's batch id into the sink table itself, through either
writer and through a kill and a replay, so the audit checks rows per batch without a batch
column from the user's transform and names the batch of a row deleted or inserted twice."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import psycopg
import pytest
from tests.runtime import harness

from eo_jobs.audit import Check, Status, audit
from eo_jobs.audit.targets import target_for
from eo_jobs.spec.loading import load_pipeline

pytestmark = pytest.mark.spark

WRITERS = {"jvm": {}, "python": {"EO_WRITER": "python"}}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_eo_fills_the_audit_column_and_the_audit_names_a_deleted_and_a_doubled_rows_batch(
    tmp_path: Path, pg_dsn: str, writer: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(harness.TABLE_DDL)
        conn.execute("ALTER TABLE public.orders ADD COLUMN eo_batch bigint")
    truth = harness.write_files(tmp_path / "in", files=6, per_file=60)
    spec = harness.files_pipeline(tmp_path, orders_options=", auditColumn: eo_batch")
    env = WRITERS[writer]
    fault = {**env, "EO_FAULT_POINT": "after-some-prepared", "EO_FAULT_BATCH": "1"}
    code, out = harness.run(spec, 1, pg_dsn, extra_env=fault)
    assert code == -signal.SIGKILL, out
    code, out = harness.run(spec, 2, pg_dsn, extra_env=env)
    assert code == 0, out
    events = [json.loads(line) for line in out.splitlines() if line.startswith('{"event"')]
    assert [e["path"] for e in events if e["event"] == "writer"] == [writer], out
    harness.assert_exact(pg_dsn, truth)

    with psycopg.connect(pg_dsn) as conn:
        per_batch = dict(
            conn.execute(
                "SELECT eo_batch, count(*) FROM public.orders GROUP BY eo_batch"
            ).fetchall()
        )
        decided = {
            r[0]
            for r in conn.execute(
                "SELECT batch_id FROM eo.decisions WHERE pipeline = %s", (harness.PIPELINE,)
            )
        }
    # Every row carries a decided batch's id (the replayed batch 1 included), none NULL.
    assert None not in per_batch and set(per_batch) <= decided, (per_batch, decided)
    assert 1 in per_batch and sum(per_batch.values()) == len(truth.valid), per_batch

    target = target_for(
        load_pipeline(spec), {"orders": pg_dsn}, pg_dsn, checkpoint=str(tmp_path / "checkpoint")
    )
    clean = audit(target)
    assert clean.ok, clean.violations
    statuses = {(c.check, c.subject): c.status for c in clean.checks}
    assert statuses[(Check.BATCH_COLUMN, "orders (public.orders.eo_batch)")] is Status.RAN
    # Not declared append-only: the whole table's count says nothing, and the audit says so.
    assert statuses[(Check.TABLE_COUNT, "orders (public.orders)")] is Status.NOT_RUN

    deleted, doubled = sorted(per_batch)[1], sorted(per_batch)[-1]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "DELETE FROM public.orders WHERE ctid = "
            "(SELECT min(ctid) FROM public.orders WHERE eo_batch = %s)",
            (deleted,),
        )
        conn.execute(
            "INSERT INTO public.orders SELECT * FROM public.orders WHERE eo_batch = %s LIMIT 1",
            (doubled,),
        )
        # A row another writer adds (no batch id) is not eo's and is not counted.
        conn.execute("INSERT INTO public.orders (order_id) VALUES (-1)")
    tampered = audit(target)
    named = sorted((v.check, v.batch) for v in tampered.violations)
    assert named == [(Check.BATCH_COLUMN, deleted), (Check.BATCH_COLUMN, doubled)], (
        tampered.violations
    )
