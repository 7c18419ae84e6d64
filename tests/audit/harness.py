"""Real decision logs for audit tests: the protocol driven as a driver does, no Spark.

``drive`` runs batches through the real ``Coordinator`` (begin, writer tasks that COPY and
PREPARE, the fenced decision, phase 2) into ``public.ledger`` with Spark-shaped source offsets
(Kafka's per topic-partition ends, or the file source's log offset), so the audit reads what a
driver would have left. Tests then damage the result with plain SQL.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psycopg

from eo_jobs.audit import AuditTarget, SinkTarget
from eo_jobs.protocol.coordinator import Coordinator, Prepared
from eo_jobs.protocol.gid import query_token
from tests.protocol import harness
from tests.protocol.harness import PIPELINE, QUERY, SINK, TASKS

Offsets = Callable[[int], list[Any]]


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
) -> Coordinator:
    """Run ``batches`` through the real protocol, each fully committed."""
    harness.create_table(dsn)
    if coord is None:
        coord = harness.coordinator(dsn, epoch)
        coord.startup()
    for batch_id in batches:
        assert coord.begin(QUERY, batch_id, offsets(batch_id)) is None
        rows = harness.batch_rows(batch_id)
        started = time.perf_counter()
        prepared: list[Prepared] = [
            harness.prepare_task(coord, dsn, batch_id, task, rows) for task in range(TASKS)
        ]
        ms = (time.perf_counter() - started) * 1000
        coord.decide_and_commit(QUERY, batch_id, prepared, offsets(batch_id), ms)
    return coord


def target(
    dsn: str,
    *,
    append_only: bool = True,
    batch_column: str | None = None,
    checkpoint: str | None = None,
    prepared_bound: float = 600.0,
) -> AuditTarget:
    """The harness pipeline as the auditor sees it: one database for control and sink."""
    sink = SinkTarget(SINK, dsn, harness.TABLE, append_only=append_only, batch_column=batch_column)
    return AuditTarget(PIPELINE, dsn, (sink,), None, checkpoint, prepared_bound)


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
