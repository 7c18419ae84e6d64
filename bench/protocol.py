"""The protocol's own costs, without Spark: phase 2 per batch, and resolving in-doubt work.

Writer tasks are threads that prepare real participants with ``PostgresWriter.write`` (as
``tests/protocol/harness.py`` does), against a real PostgreSQL server; only the driver's side
is timed:

- **decide + commit per batch** versus writer partitions and sinks: the fenced decision row,
  COMMIT PREPARED of every participant, the loser sweep, ``mark_committed`` and marker pruning
  (``Coordinator.decide_and_commit``, everything the driver does between the last writer task
  and the next batch). Two sinks live in two databases (two stores), as they usually would.
- **1,000 in-doubt transactions**: a dead epoch left 1,000 participants prepared, half of them
  winners of decided batches and half never decided; a new driver's ``Coordinator.startup``
  (fence, then resolve: commit the winners, roll back the rest) is timed, and must leave
  nothing prepared and commit exactly the winners.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import psycopg

from bench import data
from eo_jobs.pgserver import PgServer
from eo_jobs.protocol.control import ControlStore
from eo_jobs.protocol.coordinator import Coordinator, Prepared
from eo_jobs.protocol.xa import PreparedTransactions
from eo_jobs.sinks.postgres.writer import PostgresWriter

QUERY = "6c1e0f3a-2b4d-4e8f-9a7c-5d3e2f1a0b9c"
TABLE = "public.orders"
ROWS_PER_PARTICIPANT = 100
SETTINGS = {"max_prepared_transactions": "2000", "max_connections": "300"}
"""Server settings the protocol figures need (64 partitions x 2 sinks, 1,000 in doubt)."""
PREPARING_THREADS = 16


@dataclass(frozen=True)
class Phase2:
    """Decide + commit of one (partitions, sinks) shape, over several batches."""

    partitions: int
    sinks: int
    participants: int
    batches: int
    decide_commit_ms_p50: float
    decide_commit_ms_max: float
    decide_ms_p50: float
    commit_ms_p50: float
    """COMMIT PREPARED of the winners only (``BatchResult.commit_ms``)."""


@dataclass(frozen=True)
class InDoubt:
    """A new epoch's startup over a dead epoch's prepared participants."""

    transactions: int
    committed: int
    rolled_back: int
    left: int
    seconds: float
    """``RecoveryReport.seconds``: fence raised, every participant committed or rolled back."""
    wall_seconds: float
    """Around ``Coordinator.startup`` (adds the schema check and connecting)."""
    exact: bool
    """Exactly the decided winners committed, nothing left prepared, nothing else visible."""


def _rows(first: int, count: int) -> list[tuple[Any, ...]]:
    return [
        (
            e["order_id"],
            e["customer_id"],
            e["merchant"],
            e["amount_cents"],
            e["currency"],
            e["created_at"],
        )
        for e in (data.event(i) for i in range(first, first + count))
    ]


def _writer(dsn: str) -> PostgresWriter:
    return PostgresWriter(dsn=dsn, table=TABLE, columns=data.COLUMNS, lock_timeout_ms=10_000)


def _sinks(server: PgServer, tag: str, count: int) -> dict[str, str]:
    """``count`` sinks, each in a database of its own with the orders table; name -> DSN."""
    sinks: dict[str, str] = {}
    for index in range(count):
        dsn = server.create_database(f"{tag}_{index}")
        data.create_table(dsn, TABLE)
        sinks[f"orders-{index}"] = dsn
    return sinks


def _coordinator(pipeline: str, epoch: int, sinks: dict[str, str]) -> Coordinator:
    first = next(iter(sinks.values()))
    stores = {name: PreparedTransactions(dsn) for name, dsn in sinks.items()}
    return Coordinator(pipeline, epoch, ControlStore(first), stores)


def _close(coord: Coordinator) -> None:
    coord.control.close()
    for store in coord.stores.values():
        store.close()


def _prepare_all(
    coord: Coordinator, sinks: dict[str, str], batch_id: int, partitions: int, first_row: int
) -> list[Prepared]:
    """Every (sink, partition) participant of a batch, prepared by threads at once."""
    jobs = [(sink, task) for sink in sinks for task in range(partitions)]

    def one(job: tuple[str, int]) -> Prepared:
        sink, task = job
        gid = coord.gid(QUERY, sink, batch_id, task, 0)
        start = first_row + task * ROWS_PER_PARTICIPANT
        count = _writer(sinks[sink]).write(
            _rows(start, ROWS_PER_PARTICIPANT), gid=gid, pipeline=coord.pipeline, batch_id=batch_id
        )
        return Prepared(sink, gid, count)

    with ThreadPoolExecutor(min(PREPARING_THREADS, len(jobs))) as pool:
        return list(pool.map(one, jobs))


def phase2(
    server: PgServer, partitions: Sequence[int], sinks: Sequence[int], batches: int
) -> list[Phase2]:
    """Median decide + commit per batch for every (partitions, sinks) shape."""
    results: list[Phase2] = []
    for sink_count in sinks:
        for parts in partitions:
            tag = f"phase2_p{parts}_s{sink_count}"
            dsns = _sinks(server, tag, sink_count)
            coord = _coordinator(f"bench/{tag}", 1, dsns)
            coord.startup()
            totals: list[float] = []
            decides: list[float] = []
            commits: list[float] = []
            try:
                for batch_id in range(batches):
                    offsets = {"batch": batch_id}
                    assert coord.begin(QUERY, batch_id, offsets) is None
                    first = batch_id * parts * ROWS_PER_PARTICIPANT
                    prepared = _prepare_all(coord, dsns, batch_id, parts, first)
                    started = time.perf_counter()
                    result = coord.decide_and_commit(QUERY, batch_id, prepared, offsets, 0.0)
                    totals.append((time.perf_counter() - started) * 1000.0)
                    decides.append(result.decide_ms)
                    commits.append(result.commit_ms)
            finally:
                _close(coord)
            _check_phase2(dsns, batches * parts * ROWS_PER_PARTICIPANT)
            results.append(
                Phase2(
                    partitions=parts,
                    sinks=sink_count,
                    participants=parts * sink_count,
                    batches=batches,
                    decide_commit_ms_p50=statistics.median(totals),
                    decide_commit_ms_max=max(totals),
                    decide_ms_p50=statistics.median(decides),
                    commit_ms_p50=statistics.median(commits),
                )
            )
    return results


def _check_phase2(dsns: dict[str, str], rows: int) -> None:
    """Every sink holds every row of every batch and nothing is left prepared."""
    for name, dsn in dsns.items():
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT (SELECT count(*) FROM public.orders),"
                " (SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database())"
            ).fetchone()
        if row != (rows, 0):
            raise RuntimeError(
                f"phase 2 bench: sink {name} has (rows, prepared) {row}, not {rows}, 0"
            )


def in_doubt(server: PgServer, transactions: int) -> InDoubt:
    """Time a new epoch's recovery over ``transactions`` participants a dead epoch prepared.

    The dead driver (epoch 1) prepared ``transactions`` participants over batches of up to 100,
    and decided every other batch before it died; epoch 2's startup must commit exactly those
    winners and roll back the rest.
    """
    per_batch = max(1, min(100, transactions // 10))
    dsns = _sinks(server, "in_doubt", 1)
    pipeline = "bench/in-doubt"
    dead = _coordinator(pipeline, 1, dsns)
    dead.startup()
    winners = 0
    try:
        for batch_id, start in enumerate(range(0, transactions, per_batch)):
            parts = min(per_batch, transactions - start)
            # No ``begin``: it would resolve the batches before (a live driver does that);
            # this driver dies with all of them in doubt.
            prepared = _prepare_all(dead, dsns, batch_id, parts, start * ROWS_PER_PARTICIPANT)
            if batch_id % 2 == 0:
                dead.decide(QUERY, batch_id, prepared, {"batch": batch_id}, 0.0)
                winners += parts
    finally:
        _close(dead)
    new = _coordinator(pipeline, 2, dsns)
    try:
        started = time.perf_counter()
        report = new.startup()
        wall = time.perf_counter() - started
    finally:
        _close(new)
    (dsn,) = dsns.values()
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM public.orders),"
            " (SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database())"
        ).fetchone()
    exact = (
        row == (winners * ROWS_PER_PARTICIPANT, 0)
        and len(report.committed) == winners
        and len(report.rolled_back) == transactions - winners
        and report.left == 0
    )
    return InDoubt(
        transactions=transactions,
        committed=len(report.committed),
        rolled_back=len(report.rolled_back),
        left=report.left,
        seconds=report.seconds,
        wall_seconds=wall,
        exact=exact,
    )
