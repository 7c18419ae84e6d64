"""Upsert participants: hash-partitioned keys, no deadlock, deterministic last write wins."""

from __future__ import annotations

import zlib
from concurrent.futures import ThreadPoolExecutor

import psycopg

from eo_jobs.protocol.control import ensure_schema
from eo_jobs.protocol.coordinator import Prepared
from eo_jobs.sinks.postgres.writer import PostgresWriter
from tests.protocol import harness

TASKS = 4


def _task_of(key: int) -> int:
    return zlib.crc32(str(key).encode()) % TASKS


def _upsert_batch(
    coord: harness.Coordinator, dsn: str, batch: int, rows: list[tuple[int, int, int, int]]
) -> None:
    assert coord.begin(harness.QUERY, batch, {"b": batch}) is None
    writer = harness.writer(dsn, "upsert")

    def task(index: int) -> Prepared:
        gid = coord.gid(harness.QUERY, harness.SINK, batch, index, 0)
        share = [r for r in rows if _task_of(r[0]) == index]
        return Prepared(
            harness.SINK,
            gid,
            writer.write(share, gid=gid, pipeline=harness.PIPELINE, batch_id=batch),
        )

    with ThreadPoolExecutor(TASKS) as pool:
        prepared = list(pool.map(task, range(TASKS)))
    coord.decide_and_commit(harness.QUERY, batch, prepared, {"b": batch}, 0.0)


def _table(dsn: str) -> dict[int, tuple[int, int, int]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT id, batch_id, amount_cents, version FROM ledger").fetchall()
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def test_duplicate_keys_in_and_across_batches_end_with_the_newest_version(pg_dsn: str) -> None:
    harness.create_table(pg_dsn, key=True)
    coord = harness.coordinator(pg_dsn, 1)
    coord.startup()
    # batch 0: key 1 three times (versions 1, 3, 2): version 3 must win; keys 2..40 once.
    batch0 = [(1, 0, 100, 1), (1, 0, 300, 3), (1, 0, 200, 2)]
    batch0 += [(k, 0, k, 1) for k in range(2, 41)]
    _upsert_batch(coord, pg_dsn, 0, batch0)
    # batch 1: key 1 with an OLDER version (ignored), key 2 newer (wins), key 41 new.
    _upsert_batch(coord, pg_dsn, 1, [(1, 1, 999, 2), (2, 1, 222, 5), (41, 1, 41, 1)])
    table = _table(pg_dsn)
    assert table[1] == (0, 300, 3)
    assert table[2] == (1, 222, 5)
    assert len(table) == 41
    assert harness.audit(pg_dsn, range(0)).prepared_left == 0


def test_an_upsert_batch_replayed_after_a_crash_gives_the_same_table(pg_dsn: str) -> None:
    harness.create_table(pg_dsn, key=True)
    rows = [(k % 25, 0, k, k) for k in range(200)]
    coord = harness.coordinator(pg_dsn, 1)
    coord.startup()
    _upsert_batch(coord, pg_dsn, 0, rows)
    once = _table(pg_dsn)
    again = harness.coordinator(pg_dsn, 2)
    again.startup()
    assert again.begin(harness.QUERY, 0, {"b": 0}) is not None
    assert _table(pg_dsn) == once
    assert once[0] == (0, 175, 175)


def test_an_upsert_target_with_columns_it_does_not_write_takes_their_defaults(
    pg_dsn: str,
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE public.accounts (id bigserial PRIMARY KEY, account text UNIQUE, "
            "balance bigint, updated_at timestamptz NOT NULL DEFAULT now())"
        )
        ensure_schema(conn)  # the staging tables live in schema eo
    writer = PostgresWriter(
        dsn=pg_dsn,
        table="public.accounts",
        columns=("account", "balance"),
        mode="upsert",
        key_columns=("account",),
    )

    merged = writer.write([("a", 1), ("b", 2), ("a", 3)], gid=None, pipeline="p", batch_id=0)
    writer.write([("b", 4)], gid=None, pipeline="p", batch_id=1)

    assert merged == 2
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(
            "SELECT id, account, balance, updated_at IS NOT NULL FROM accounts ORDER BY account"
        ).fetchall()
    assert rows == [(1, "a", 3, True), (2, "b", 4, True)]
