"""Decided batches for the operator scale bench's pipelines, written by eo's own protocol.

The scale bench's drivers are stand-ins (no JVM), so on their own they give the continuous
audit nothing to read. This module writes what a driver would: per pipeline a table of its
own with an ``auditColumn``, and batches through the real coordinator (writer tasks prepared
with their markers, one decision, phase 2), so each audit pass reads real decisions, markers
and rows per batch. ``seed`` gives every pipeline a history before the operator sees it (the
fence left free, as a first driver that exited leaves it); ``Feeder`` then acts as the running
pipelines' drivers, a batch per pipeline every ``every`` seconds, under the epoch and owner the
operator put on the fence when it launched the stand-in, so the audit has new batches to read
in every pass, as in production.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from eo_jobs.protocol.control import ControlStore
from eo_jobs.protocol.coordinator import Coordinator, Prepared
from eo_jobs.protocol.errors import FencedError
from eo_jobs.protocol.xa import PreparedTransactions
from eo_jobs.sinks.postgres.writer import PostgresWriter

SINK = "orders"
AUDIT_COLUMN = "eo_batch"
COLUMNS = ("order_id", "merchant", "amount_cents", AUDIT_COLUMN)
TASKS = 2
"""Writer tasks (participants) per batch, the spec's default writerPartitions."""


def table_of(name: str) -> str:
    """The pipeline's own sink table (``schema.table``)."""
    return f"public.orders_{name}"


def create_tables(dsn: str, names: Iterable[str]) -> None:
    """One append table per pipeline, with the batch id column eo fills (indexed, as
    docs/audit.md advises, since each pass counts the rows above its position)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in names:
            table = sql.Identifier("public", f"orders_{name}")
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (order_id bigint, merchant text, "
                    "amount_cents bigint, eo_batch bigint)"
                ).format(table)
            )
            index = sql.Identifier(f"orders_{name}_eo_batch")
            conn.execute(
                sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (eo_batch)").format(index, table)
            )


@dataclass
class PipelineWriter:
    """One pipeline's driver stand-in for the protocol: its coordinator, query and next batch."""

    key: str
    name: str
    dsn: str
    rows: int
    query: str = field(default_factory=lambda: str(uuid.uuid4()))
    next_batch: int = 0
    coordinator: Coordinator | None = None

    def attach(self, epoch: int, owner: str | None) -> None:
        """Write under this fence epoch and owner (the operator's, once it launched)."""
        if self.coordinator is not None:
            self.coordinator.close()
        self.coordinator = Coordinator(
            self.key, epoch, ControlStore(self.dsn), {SINK: PreparedTransactions(self.dsn)}, owner
        )

    def batch(self) -> int:
        """One batch through the protocol; returns the rows it wrote."""
        coord = self.coordinator
        assert coord is not None
        batch_id = self.next_batch
        offsets = {"start": batch_id * self.rows, "end": (batch_id + 1) * self.rows}
        if coord.begin(self.query, batch_id, offsets) is not None:
            self.next_batch += 1
            return 0
        writer = PostgresWriter(dsn=self.dsn, table=table_of(self.name), columns=COLUMNS)
        started = time.perf_counter()
        prepared: list[Prepared] = []
        for task in range(TASKS):
            share = [
                (batch_id * self.rows + i, f"m{i % 7}", (i * 37) % 10_000, batch_id)
                for i in range(task, self.rows, TASKS)
            ]
            gid = coord.gid(self.query, SINK, batch_id, task, 0)
            count = writer.write(share, gid=gid, pipeline=self.key, batch_id=batch_id)
            prepared.append(Prepared(SINK, gid, count))
        ms = (time.perf_counter() - started) * 1000
        coord.decide_and_commit(self.query, batch_id, prepared, offsets, ms)
        self.next_batch += 1
        return self.rows

    def close(self) -> None:
        if self.coordinator is not None:
            self.coordinator.close()
            self.coordinator = None


def seed(writers: Sequence[PipelineWriter], batches: int, threads: int = 4) -> None:
    """``batches`` decided batches for each pipeline before the operator sees it: epoch 1, no
    owner (a free fence the operator then claims, as after a first driver)."""

    def one(writer: PipelineWriter) -> None:
        writer.attach(1, None)
        assert writer.coordinator is not None
        writer.coordinator.startup()
        for _ in range(batches):
            writer.batch()
        writer.close()

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, writers))


class Feeder:
    """The running pipelines' batches, one per pipeline every ``every`` seconds, on a thread."""

    def __init__(self, writers: Sequence[PipelineWriter], every: float) -> None:
        self.writers = list(writers)
        self.every = every
        self.batches = 0
        self.fenced = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="audit-feeder", daemon=True)

    def add(self, writers: Iterable[PipelineWriter]) -> None:
        """More running pipelines (the next step's)."""
        self.writers.extend(writers)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        for writer in self.writers:
            writer.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            for writer in list(self.writers):
                if self._stop.is_set():
                    return
                self._one(writer)
            self._stop.wait(max(0.0, self.every - (time.monotonic() - started)))

    def _one(self, writer: PipelineWriter) -> None:
        """A batch under the fence as it stands now; a new epoch (the operator relaunched the
        stand-in) is taken up, as the new driver would."""
        try:
            if writer.coordinator is None:
                self._attach(writer)
            writer.batch()
            self.batches += 1
        except FencedError:
            self.fenced += 1
            self._attach(writer)

    @staticmethod
    def _attach(writer: PipelineWriter) -> None:
        store = ControlStore(writer.dsn)
        try:
            fence = store.fence(writer.key)
        finally:
            store.close()
        if fence is not None:
            writer.attach(fence.epoch, fence.owner)
