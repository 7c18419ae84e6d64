"""Real decision logs for audit tests: the protocol driven as a driver does, no Spark.

``drive`` runs batches through the real ``Coordinator`` (begin, writer tasks that COPY and
PREPARE, the fenced decision, phase 2) into ``public.ledger`` with Spark-shaped source offsets
(Kafka's per topic-partition ends, or the file source's log offset), so the audit reads what a
driver would have left. Tests then damage the result with plain SQL.

With ``sums`` each decision records what a driver's sum columns would (``ledger_sums``: the
exact sum of ``amount_cents`` over the batch's rows), and with ``totals`` every writer task also
prepares a participant of the sink ``totals`` that adds its rows' amounts per merchant onto
``public.totals`` (mode accumulate), under the same decision.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import psycopg

from eo_jobs.audit import AuditTarget, SinkTarget
from eo_jobs.protocol.control import ControlStore, Sums
from eo_jobs.protocol.coordinator import Coordinator, Prepared
from eo_jobs.protocol.gid import query_token
from eo_jobs.protocol.xa import PreparedTransactions
from eo_jobs.sinks.postgres.writer import PostgresWriter
from tests.protocol import harness
from tests.protocol.harness import PIPELINE, QUERY, SINK, TASKS

Offsets = Callable[[int], list[Any]]
BatchSums = Sums | None
Sums = Callable[[int], BatchSums]

TOTALS = "totals"
TOTALS_TABLE = "public.totals"


def merchant(row_id: int) -> str:
    """The merchant of a row: each belongs to one writer task (``id % TASKS``), so tasks of a
    batch never wait on each other's row locks in ``public.totals``."""
    return f"m{row_id % (2 * TASKS)}"


def ledger_sums(batch_id: int, *, totals: bool = False) -> BatchSums:
    """The sums a driver records for batch N: ``amount_cents`` in the ledger (and ``volume``
    in the totals, the same amounts)."""
    amount = str(sum(r[2] for r in harness.batch_rows(batch_id)))
    sums: dict[str, Mapping[str, str] | None] = {SINK: {"amount_cents": amount}}
    if totals:
        sums[TOTALS] = {"volume": amount}
    return sums


def totals_sums(batch_id: int) -> BatchSums:
    """``ledger_sums`` with the totals sink."""
    return ledger_sums(batch_id, totals=True)


def totals_coordinator(dsn: str, epoch: int) -> Coordinator:
    """A coordinator of both sinks (ledger and totals) in one database, started."""
    stores = {SINK: PreparedTransactions(dsn), TOTALS: PreparedTransactions(dsn)}
    coord = Coordinator(PIPELINE, epoch, ControlStore(dsn), stores)
    coord.startup()
    return coord


def prepare_totals(coord: Coordinator, dsn: str, batch_id: int, task: int) -> Prepared:
    """One writer task's participant of the totals sink: its amounts added per merchant."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {TOTALS_TABLE} (merchant text PRIMARY KEY, volume bigint)"
        )
    writer = PostgresWriter(
        dsn=dsn,
        table=TOTALS_TABLE,
        columns=("merchant", "volume"),
        mode="accumulate",
        key_columns=("merchant",),
        add_columns=("volume",),
        lock_timeout_ms=5000,
    )
    share = [(merchant(r[0]), r[2]) for r in harness.batch_rows(batch_id) if r[0] % TASKS == task]
    gid = coord.gid(QUERY, TOTALS, batch_id, task, 0)
    count = writer.write(share, gid=gid, pipeline=coord.pipeline, batch_id=batch_id)
    return Prepared(TOTALS, gid, count)


def kafka(batch_id: int) -> list[Any]:
    """Kafka ends after batch N: partition 0 moves 20 a batch, partition 1 moves 40."""
    return [{"orders": {"0": (batch_id + 1) * 20, "1": (batch_id + 1) * 40}}]


def files(batch_id: int) -> list[Any]:
    """The file source's log offset after batch N: one log entry per batch."""
    return [{"logOffset": batch_id}]


def drive(
    dsn: str,
    batches: Iterable[int],
    offsets: Offsets = kafka,
    *,
    epoch: int = 1,
    coord: Coordinator | None = None,
    sums: Sums | None = None,
    totals: bool = False,
) -> Coordinator:
    """Run ``batches`` through the real protocol, each fully committed, each decision with
    ``sums(batch)``; ``totals`` writes the totals sink too (``coord`` must know it)."""
    harness.create_table(dsn)
    if coord is None and totals:
        coord = totals_coordinator(dsn, epoch)
    elif coord is None:
        coord = harness.coordinator(dsn, epoch)
        coord.startup()
    for batch_id in batches:
        assert coord.begin(QUERY, batch_id, offsets(batch_id)) is None
        rows = harness.batch_rows(batch_id)
        started = time.perf_counter()
        prepared: list[Prepared] = [
            harness.prepare_task(coord, dsn, batch_id, task, rows) for task in range(TASKS)
        ]
        if totals:
            prepared.extend(prepare_totals(coord, dsn, batch_id, t) for t in range(TASKS))
        ms = (time.perf_counter() - started) * 1000
        recorded = None if sums is None else sums(batch_id)
        coord.decide_and_commit(QUERY, batch_id, prepared, offsets(batch_id), ms, recorded)
    return coord


def target(
    dsn: str,
    *,
    append_only: bool = True,
    batch_column: str | None = None,
    checkpoint: str | None = None,
    prepared_bound: float = 600.0,
    sum_columns: tuple[str, ...] = (),
    totals: bool = False,
    by_eo: bool = False,
) -> AuditTarget:
    """The harness pipeline as the auditor sees it: one database for control and sinks (the
    totals sink, with ``totals``, accumulating ``volume``)."""
    sink = SinkTarget(
        SINK,
        dsn,
        harness.TABLE,
        append_only=append_only,
        batch_column=batch_column,
        batch_column_by_eo=by_eo,
        sum_columns=sum_columns,
    )
    sinks = (sink,)
    if totals:
        sinks += (SinkTarget(TOTALS, dsn, TOTALS_TABLE, sum_columns=("volume",), accumulates=True),)
    return AuditTarget(PIPELINE, dsn, sinks, None, checkpoint, prepared_bound)


def harness_token() -> str:
    """The harness query's token (positions are kept per query token)."""
    return query_token(QUERY)


def sql(dsn: str, statement: str, params: tuple[Any, ...] | None = None) -> list[tuple[Any, ...]]:
    """Run one statement (the damage), return its rows if any."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def write_checkpoint(folder: Path, query_id: str, entries: dict[int, list[str]]) -> None:
    """A file-source checkpoint in Spark's format: metadata, offsets/N, sources/0/N.

    Batch N's offsets end at log entry N, and entry N lists ``entries[N]``.
    """
    (folder / "offsets").mkdir(parents=True, exist_ok=True)
    (folder / "sources" / "0").mkdir(parents=True, exist_ok=True)
    (folder / "metadata").write_text(json.dumps({"id": query_id}) + "\n")
    for batch_id, paths in entries.items():
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}}
        (folder / "offsets" / str(batch_id)).write_text(
            "v1\n" + json.dumps(meta) + "\n" + json.dumps(files(batch_id)[0]) + "\n"
        )
        lines = [
            json.dumps(
                {
                    "path": p,
                    "size": 1,
                    "isDir": False,
                    "modificationTime": 0,
                    "blockReplication": 1,
                    "blockSize": 1,
                    "action": "add",
                    "batchId": batch_id,
                }
            )
            for p in paths
        ]
        (folder / "sources" / "0" / str(batch_id)).write_text("v1\n" + "\n".join(lines) + "\n")
