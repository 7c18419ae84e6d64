"""Phase 2's metrics and housekeeping (the completion mark, marker pruning) never fail a batch."""

from __future__ import annotations

import logging

import psycopg
import pytest

from tests.protocol import harness

REFUSE = """CREATE FUNCTION public.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'refused by the test: % on %', TG_OP, TG_TABLE_NAME; END $$"""


def _refuse(dsn: str, verb: str, table: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        if conn.execute("SELECT to_regproc('public.refuse')").fetchone() == (None,):
            conn.execute(REFUSE)
        conn.execute(
            f"CREATE TRIGGER refuse_{verb.lower()} BEFORE {verb} ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION public.refuse()"
        )


def test_batches_commit_when_the_completion_mark_and_the_marker_prune_fail(
    pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    harness.create_table(pg_dsn)
    coord = harness.coordinator(pg_dsn, 1)
    coord.startup()
    _refuse(pg_dsn, "UPDATE", "eo.decisions")  # mark_committed
    _refuse(pg_dsn, "DELETE", "eo.markers")  # prune_markers

    with caplog.at_level(logging.WARNING, logger="eo.coordinator"):
        results = [harness.run_batch(coord, pg_dsn, batch) for batch in range(2)]

    assert [r.rows for r in results] == [harness.ROWS_PER_BATCH] * 2
    audit = harness.audit(pg_dsn, range(2))
    assert audit == harness.Audit(120, 120, 0, 0, 0, 0), audit
    warned = [r.getMessage() for r in caplog.records]
    assert sum("refused by the test: UPDATE" in m for m in warned) == 2, warned
    # Pruning runs every MARKER_PRUNE_EVERY batches: at batch 0 here.
    assert sum("refused by the test: DELETE" in m for m in warned) == 1, warned
    with psycopg.connect(pg_dsn) as conn:
        marks = conn.execute("SELECT committed_at FROM eo.decisions ORDER BY batch_id").fetchall()
    assert marks == [(None,), (None,)]  # metrics only: the batches are committed all the same
