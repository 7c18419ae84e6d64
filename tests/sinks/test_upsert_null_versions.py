"""Upsert with a NULL version: one rule (NULL is oldest), whatever the batch boundaries."""

from __future__ import annotations

import psycopg

from eo_jobs.protocol.xa import PreparedTransactions
from eo_jobs.sinks.postgres.writer import PostgresWriter
from tests.protocol import harness


def _writer(dsn: str) -> PostgresWriter:
    return PostgresWriter(
        dsn=dsn,
        table=harness.TABLE,
        columns=("id", "batch_id", "amount_cents", "version"),
        mode="upsert",
        key_columns=("id",),
        version_column="version",
    )


def _final(dsn: str, batches: list[list[tuple[int, int, int, int | None]]]) -> dict[int, int]:
    PreparedTransactions(dsn).ensure_schema()  # the staging tables live in schema eo
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {harness.TABLE}")
    for index, rows in enumerate(batches):
        _writer(dsn).write(rows, gid=None, pipeline=harness.PIPELINE, batch_id=index)
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute(f"SELECT id, amount_cents FROM {harness.TABLE}").fetchall())


def test_a_null_version_is_older_than_any_value_in_one_batch_and_across_batches(
    pg_dsn: str,
) -> None:
    harness.create_table(pg_dsn, key=True)
    null_first = [(1, 0, 100, None), (1, 0, 200, 5)]
    value_first = [(1, 0, 200, 5), (1, 0, 100, None)]
    # One batch, either order: the versioned row wins.
    assert _final(pg_dsn, [null_first]) == {1: 200}
    assert _final(pg_dsn, [value_first]) == {1: 200}
    # The same rows split over two batches, either order: the same result.
    assert _final(pg_dsn, [[null_first[0]], [null_first[1]]]) == {1: 200}
    assert _final(pg_dsn, [[value_first[0]], [value_first[1]]]) == {1: 200}


def test_among_null_versions_the_later_row_wins_in_one_batch_and_across_batches(
    pg_dsn: str,
) -> None:
    harness.create_table(pg_dsn, key=True)
    rows = [(1, 0, 100, None), (1, 0, 300, None)]
    assert _final(pg_dsn, [rows]) == {1: 300}
    assert _final(pg_dsn, [[rows[0]], [rows[1]]]) == {1: 300}
