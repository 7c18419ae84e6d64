"""A Spark-free driver for protocol tests: deterministic batches, real databases, real crashes.

``run_batch`` plays the driver: begin, writer tasks prepare (threads, as Spark tasks would),
decide, commit. ``python -m tests.protocol.harness ...`` runs the same in a child process so a
test can arm a fault point (``EO_FAULT_POINT``) and have the driver SIGKILL itself there.

The control tables are in PostgreSQL; the sink is the same database unless a ``sink_dsn`` is
given, which may be a MariaDB database (``mysql://``): the table, the writer, the store and the
audit follow the DSN's kind (``protocol.databases.kind``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psycopg

from eo_jobs.protocol import mysql_xa
from eo_jobs.protocol.coordinator import BatchResult, Coordinator, Prepared
from eo_jobs.protocol.databases import control_store, kind, participant_store
from eo_jobs.protocol.faults import crash_point
from eo_jobs.protocol.gid import pipeline_prefix
from eo_jobs.sinks.mysql.writer import MySqlWriter
from eo_jobs.sinks.postgres.writer import PostgresWriter

PIPELINE = "default/ledger"
QUERY = "3f2b0c9e-8d1a-4c6b-9e2f-0a1b2c3d4e5f"
SINK = "ledger"
TABLE = "public.ledger"
MYSQL_TABLE = "ledger"
COLUMNS = ("id", "batch_id", "amount_cents", "version")
ROWS_PER_BATCH = 60
TASKS = 3
REPO = Path(__file__).resolve().parents[2]


def create_table(dsn: str, table: str = TABLE, *, key: bool = False) -> None:
    """The target table; no primary key in append tests so duplicates are counted, not refused."""
    pk = " PRIMARY KEY" if key else ""
    if kind(dsn) == "mysql":
        with mysql_xa.connect(dsn) as conn, conn.cursor() as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {MYSQL_TABLE} (id bigint{pk}, batch_id bigint, "
                "amount_cents bigint, version bigint) ENGINE=InnoDB"
            )
        return
    with psycopg.connect(dsn, autocommit=True) as pg:
        pg.execute(
            f"CREATE TABLE IF NOT EXISTS {table} (id bigint{pk}, batch_id bigint, "
            "amount_cents bigint, version bigint)"
        )


def batch_rows(batch_id: int) -> list[tuple[int, int, int, int]]:
    """The fixed input of batch N (Spark's offset log makes replays see the same rows)."""
    base = batch_id * 1000
    return [(base + i, batch_id, (base + i) * 7 % 1013, 0) for i in range(ROWS_PER_BATCH)]


def offsets(batch_id: int) -> dict[str, int]:
    """Source offsets of batch N, recorded in its decision."""
    return {"start": batch_id * ROWS_PER_BATCH, "end": (batch_id + 1) * ROWS_PER_BATCH}


def writer(dsn: str, mode: str = "append") -> PostgresWriter | MySqlWriter:
    """The writer of the ledger table (a MySQL sink: append only)."""
    if kind(dsn) == "mysql":
        assert mode == "append"
        return MySqlWriter(dsn=dsn, table=MYSQL_TABLE, columns=COLUMNS, lock_wait_timeout_s=5)
    return PostgresWriter(
        dsn=dsn,
        table=TABLE,
        columns=COLUMNS,
        mode=mode,
        key_columns=("id",) if mode == "upsert" else (),
        version_column="version" if mode == "upsert" else None,
        lock_timeout_ms=5000,
    )


def coordinator(
    dsn: str, epoch: int, pipeline: str = PIPELINE, sink_dsn: str | None = None
) -> Coordinator:
    """A coordinator whose control tables live in ``dsn``, and its sink too unless
    ``sink_dsn`` names another database (of any kind)."""
    return Coordinator(
        pipeline, epoch, control_store(dsn), {SINK: participant_store(sink_dsn or dsn)}
    )


def prepare_task(
    coord: Coordinator,
    dsn: str,
    batch_id: int,
    task: int,
    rows: Sequence[tuple[int, int, int, int]],
    attempt: int = 0,
    mode: str = "append",
) -> Prepared:
    """One writer task: its share of the batch, prepared under its gid."""
    gid = coord.gid(QUERY, SINK, batch_id, task, attempt)
    share = [r for r in rows if r[0] % TASKS == task]
    count = writer(dsn, mode).write(share, gid=gid, pipeline=coord.pipeline, batch_id=batch_id)
    return Prepared(SINK, gid, count)


def run_batch(coord: Coordinator, dsn: str, batch_id: int, mode: str = "append") -> BatchResult:
    """The driver's whole batch, as ``foreachBatch`` does it."""
    decision = coord.begin(QUERY, batch_id, offsets(batch_id))
    if decision is not None:
        return BatchResult(batch_id, True, decision.rows_written, 0, 0, 0, 0, {})
    rows = batch_rows(batch_id)
    started = time.perf_counter()
    prepared: list[Prepared] = []
    for task in range(TASKS):
        prepared.append(prepare_task(coord, dsn, batch_id, task, rows, mode=mode))
        crash_point("after-some-prepared", batch_id)
    prepare_ms = (time.perf_counter() - started) * 1000
    return coord.decide_and_commit(QUERY, batch_id, prepared, offsets(batch_id), prepare_ms)


def run_parallel_batch(coord: Coordinator, dsn: str, batch_id: int) -> BatchResult:
    """Like ``run_batch`` but with the writer tasks on threads at once."""
    assert coord.begin(QUERY, batch_id, offsets(batch_id)) is None
    rows = batch_rows(batch_id)
    with ThreadPoolExecutor(TASKS) as pool:
        prepared = list(
            pool.map(lambda t: prepare_task(coord, dsn, batch_id, t, rows), range(TASKS))
        )
    return coord.decide_and_commit(QUERY, batch_id, prepared, offsets(batch_id), 0.0)


@dataclass(frozen=True)
class Audit:
    """Sink vs source: duplicates and gaps counted separately."""

    rows: int
    distinct: int
    duplicates: int
    missing: int
    unexpected: int
    prepared_left: int


def audit(dsn: str, batches: range) -> Audit:
    """Compare the table with the union of the batches' inputs."""
    expected = {r[0] for b in batches for r in batch_rows(b)}
    left: tuple[int, ...] | None
    if kind(dsn) == "mysql":
        store = mysql_xa.MySqlPreparedTransactions(dsn)
        try:
            ids = [r[0] for r in store.query(f"SELECT id FROM {MYSQL_TABLE}")]
            left = (len(store.in_doubt(pipeline_prefix(PIPELINE))),)
        finally:
            store.close()
    else:
        ids, left = _pg_ids_and_left(dsn)
    seen = set(ids)
    return Audit(
        rows=len(ids),
        distinct=len(seen),
        duplicates=len(ids) - len(seen),
        missing=len(expected - seen),
        unexpected=len(seen - expected),
        prepared_left=int(left[0]) if left else -1,
    )


def _pg_ids_and_left(dsn: str) -> tuple[list[int], tuple[int, ...] | None]:
    with psycopg.connect(dsn) as conn:
        ids = [r[0] for r in conn.execute(f"SELECT id FROM {TABLE}").fetchall()]
        left = conn.execute(
            "SELECT count(*) FROM pg_prepared_xacts WHERE starts_with(gid, %s) "
            "AND database = current_database()",
            (pipeline_prefix(PIPELINE),),
        ).fetchone()
    return ids, left


def run_in_child(
    dsn: str,
    epoch: int,
    batches: Sequence[int],
    fault: str | None,
    fault_batch: int | None = None,
    sink_dsn: str | None = None,
) -> int:
    """Run batches in a child driver process; return its exit code (-9 when it crashed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EO_FAULT")}
    if fault is not None:
        env["EO_FAULT_POINT"] = fault
        if fault_batch is not None:
            env["EO_FAULT_BATCH"] = str(fault_batch)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.protocol.harness",
            dsn,
            str(epoch),
            json.dumps(list(batches)),
            *([] if sink_dsn is None else ["--sink-dsn", sink_dsn]),
        ],
        cwd=REPO,
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode not in (0, -9):
        raise RuntimeError(f"child driver failed ({proc.returncode}): {proc.stderr}")
    return proc.returncode


def _main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dsn")
    parser.add_argument("epoch", type=int)
    parser.add_argument("batches")
    parser.add_argument("--sink-dsn")
    args = parser.parse_args()
    coord = coordinator(args.dsn, args.epoch, sink_dsn=args.sink_dsn)
    coord.startup()
    for batch_id in json.loads(args.batches):
        run_batch(coord, args.sink_dsn or args.dsn, batch_id)


if __name__ == "__main__":
    _main()
