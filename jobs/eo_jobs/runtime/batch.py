"""``foreachBatch``: one micro-batch through the commit protocol.

Writer tasks are Spark tasks (``mapInArrow``): each prepares one transaction named by
(pipeline, query, sink, epoch, batch, partition, attempt) and hands back its gid; the driver
then writes the one decision for the batch and returns; phase 2 runs in the background
(``runtime.phase_two``) while Spark logs the batch and plans the next one, which waits for it.
Records that do not parse, that make the SQL transform fail, or that no sink can store (a NUL
character in text, a NULL upsert key) go to the dead-letter table as one more participant of the
same decision, so a replay duplicates them no more than it duplicates good rows, and a poison
record never stops the pipeline.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from eo_jobs import logs
from eo_jobs.protocol.coordinator import BatchResult, Coordinator, Decided, Prepared
from eo_jobs.protocol.faults import armed, crash_point
from eo_jobs.runtime.arrow_writer import ArrowWriteJob, arrow_task_writer
from eo_jobs.runtime.batch_sums import batch_sums
from eo_jobs.runtime.checkpoint import CheckpointLog
from eo_jobs.runtime.failed_attempts import FailedAttempts
from eo_jobs.runtime.isolation import ROW_ID, TransformIsolation, is_data_error
from eo_jobs.runtime.jvm_writer import JvmWriter, jvm_has_class
from eo_jobs.runtime.one_pass import OnePass
from eo_jobs.runtime.phase_two import PhaseTwo
from eo_jobs.runtime.poison import split_unstorable
from eo_jobs.runtime.reread import ReadPolicy, Reread, is_malformed
from eo_jobs.runtime.sink_query import SinkQuery
from eo_jobs.runtime.source import ERROR, RAW
from eo_jobs.runtime.task import WriterTask
from eo_jobs.sinks.kinds import kind_of
from eo_jobs.sinks.postgres.arrow_copy import DL_RAW, DL_REASON
from eo_jobs.sinks.postgres.writer import storable_text
from eo_jobs.sinks.table_writer import TableWriter
from eo_jobs.spec.models import DEAD_LETTER_SINK, Guarantee, PipelineSpec, SinkSpec

log = logging.getLogger("eo.batch")

DEAD_LETTER_COLUMNS = ("pipeline", "batch_id", "raw", "reason")
COMMIT_LOG_WAIT_SECONDS = 60.0


@dataclass
class Written:
    """What a batch's writer tasks prepared, and how many dead letters went with them."""

    prepared: list[Prepared] = field(default_factory=list)
    dead_letters: int = 0
    sums: dict[str, dict[str, str] | None] = field(default_factory=dict)
    """Per sink with sum columns: their sums over the rows written, None if not comparable."""


@dataclass
class BatchContext:
    """Everything a batch needs that does not change between batches."""

    spec: PipelineSpec
    pipeline: str
    epoch: int
    coordinator: Coordinator
    writers: dict[str, TableWriter]
    dead_letters: TableWriter
    checkpoint: CheckpointLog
    on_batch: Callable[[BatchResult, float], None] = lambda _r, _s: None
    on_failure: Callable[[BaseException], None] = lambda _e: None
    failed_attempts: FailedAttempts | None = None
    reread: Reread | None = None
    in_batch: threading.Event = field(default_factory=threading.Event)
    jvm_ready: str | None = "not checked"
    """None when eo's JVM writer can run in the session (``jvm_writer.jvm_ready``), else why not."""


class ForeachBatch:
    """The callable given to ``writeStream.foreachBatch``."""

    def __init__(self, ctx: BatchContext) -> None:
        self.ctx = ctx
        self.transform = TransformIsolation(ctx.spec.transform.sql if ctx.spec.transform else None)
        self.two_phase = ctx.spec.guarantee == Guarantee.EXACTLY_ONCE
        self.queries = {s.name: q for s in ctx.spec.sinks if (q := SinkQuery.of(s)) is not None}
        self.keys, self.adds = self._checked_columns()
        self.one_pass = OnePass(self.transform.sql, self.keys, self.adds)
        self._jobs: dict[WriterTask, ArrowWriteJob] = {}
        self._jvm: dict[str, JvmWriter | None] = {}
        self.summing = any(s.target.sum_columns for s in ctx.spec.sinks)
        self.phase_two = PhaseTwo()
        self.read_policy = ReadPolicy()

    def drain(self) -> None:
        """Wait for the last batch's phase 2 (the query ended); raise its failure."""
        self.phase_two.wait()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        self.ctx.in_batch.set()
        try:
            self.phase_two.wait()  # the last batch's, normally over long before
            logs.set_context(batch=batch_id)
            self._batch(df, batch_id)
        except BaseException as exc:
            self.ctx.on_failure(exc)
            raise
        finally:
            logs.set_context(batch=None)
            self.ctx.in_batch.clear()

    def _batch(self, df: DataFrame, batch_id: int) -> None:
        ctx = self.ctx
        started = time.perf_counter()
        query_id = ctx.checkpoint.query_id()
        offsets = ctx.checkpoint.offsets(batch_id)
        decision = ctx.coordinator.begin(query_id, batch_id, offsets)
        if decision is not None:
            logs.event(
                "replay",
                batch=batch_id,
                decided_by_epoch=decision.epoch,
                rows=decision.rows_written,
            )
            return
        try:
            written = self._prepare(df, query_id, batch_id)
        except BaseException as exc:
            ctx.coordinator.abandon(batch_id, f"{type(exc).__name__}: {exc}"[:2000], query_id)
            raise
        prepare_ms = (time.perf_counter() - started) * 1000.0
        prepared = written.prepared
        if not self.two_phase:
            result = ctx.coordinator.record(query_id, batch_id, prepared, offsets, prepare_ms)
            self._done(result, written.dead_letters, started)
            return
        decided = ctx.coordinator.decide(
            query_id, batch_id, prepared, offsets, prepare_ms, written.sums or None
        )
        if armed("after-commits", batch_id):
            # The brief's crash point "all commits, before Spark's commit log": phase 2 must end
            # before Spark gets the batch back, or the kill races Spark's write of its log.
            self._commit(decided, written.dead_letters, started)
            return
        self.phase_two.start(batch_id, lambda: self._commit(decided, written.dead_letters, started))

    def _commit(self, decided: Decided, dead_letters: int, started: float) -> None:
        """Phase 2 of a decided batch (on ``PhaseTwo``'s thread, after Spark got it back)."""
        if armed("after-spark-commit-log", decided.batch_id):
            self._await_commit_log(decided.batch_id)
        crash_point("after-spark-commit-log", decided.batch_id)
        self._done(self.ctx.coordinator.commit(decided), dead_letters, started)

    def _await_commit_log(self, batch_id: int) -> None:
        """For the crash point only: let Spark log the batch first (it does within ms)."""
        deadline = time.monotonic() + COMMIT_LOG_WAIT_SECONDS
        while not self.ctx.checkpoint.committed(batch_id):
            if time.monotonic() > deadline:
                raise TimeoutError(f"Spark did not log batch {batch_id} as committed")
            time.sleep(0.01)

    def _done(self, result: BatchResult, dead_letters: int, started: float) -> None:
        by_sink = {**result.rows_by_sink, DEAD_LETTER_SINK: dead_letters}
        self.ctx.on_batch(replace(result, rows_by_sink=by_sink), time.perf_counter() - started)

    def _prepare(self, df: DataFrame, query_id: str, batch_id: int) -> Written:
        """Write the batch; a batch with a record that does not parse is read again for it.

        The stream fails on such a record (``runtime.reread``): what the failed pass prepared
        is rolled back, nothing of it was decided, and the batch's files or offsets are read
        again with the record kept aside as a dead letter. After that, ``ReadPolicy``
        decides whether the next batches try the stream first or are read that way at once.
        Without two-phase commit there is no first pass to try: its writer tasks commit their
        own rows, so a pass failing on another task's record could not be rolled back and the
        re-read would write those rows twice. Such a batch is read with the column at once.
        """
        ctx = self.ctx
        if ctx.reread is None:
            return self._written(df, query_id, batch_id)
        if not self.two_phase or not self.read_policy.fast_first():
            return self._read_again(query_id, batch_id, first_read="skipped", rolled_back=0)
        try:
            return self._written(df, query_id, batch_id)
        except Exception as exc:
            if not is_malformed(exc):
                raise
            undone = ctx.coordinator.abandon(batch_id)
        self.read_policy.failed()
        return self._read_again(query_id, batch_id, first_read="failed", rolled_back=undone)

    def _read_again(
        self, query_id: str, batch_id: int, first_read: str, rolled_back: int
    ) -> Written:
        """The batch read again, records that do not parse kept aside (``_prepare``)."""
        reread = self.ctx.reread
        assert reread is not None
        extent = reread.extent(batch_id)
        logs.event(
            "reread",
            batch=batch_id,
            **extent,
            first_read=first_read,
            rolled_back=rolled_back,
        )
        if first_read == "failed":
            log.warning(
                "batch %s: a record does not parse; rolled back %d participants, reading the "
                "batch again (%s) to set it aside",
                batch_id,
                rolled_back,
                ", ".join(f"{v} {k}" for k, v in extent.items()),
            )
        written = self._written(reread.frame(batch_id), query_id, batch_id)
        self.read_policy.read_with_column(written.dead_letters)
        return written

    def _written(self, df: DataFrame, query_id: str, batch_id: int) -> Written:
        """Write the batch: one pass, or, if the transform fails on some rows, isolate them."""
        ctx = self.ctx
        # With a transform the one pass reads the input twice (rows and dead letters), and the
        # sums of sum columns once more: cache it.
        cached = self.transform.sql is not None or bool(self.queries) or self.summing
        staged = df.persist() if cached else df
        try:
            try:
                return self._one_pass(staged, query_id, batch_id)
            except PySparkException as exc:
                if not is_data_error(exc):
                    raise
                undone = ctx.coordinator.abandon(batch_id)
                log.warning(
                    "batch %s: the transform failed on some rows (%s); rolled back %d "
                    "participants, isolating the failing rows",
                    batch_id,
                    str(exc).splitlines()[0][:300],
                    undone,
                )
            return self._isolating(staged, query_id, batch_id)
        finally:
            if cached:  # a Py4J round trip on the batch's critical path otherwise
                staged.unpersist()

    def _checked_columns(self) -> tuple[set[str], frozenset[str]]:
        """The key and add columns a pipeline output row may not hold NULL in: those of the
        sinks that write the pipeline's output as is (a sink with its own query checks its
        own rows, ``SinkQuery``)."""
        plain = [s.target for s in self.ctx.spec.sinks if s.name not in self.queries]
        keys = {k for p in plain if p.mode != "append" for k in p.key_columns}
        return keys, frozenset(c for p in plain for c in p.add_columns)

    def _letters_of(self, index: int, sink: SinkSpec) -> TableWriter | None:
        """Who writes dead letters in this sink's tasks: the first sink the pipeline's, a sink
        with its own query the rows of it that it cannot store (into the dead-letter table of
        its own database); other sinks' tasks drop the dead-letter rows they see."""
        ctx = self.ctx
        if index == 0:
            return ctx.dead_letters
        if sink.name not in self.queries:
            return None
        dsn = ctx.writers[sink.name].dsn
        return kind_of(dsn).dead_letter_writer(dsn, ctx.spec.dead_letter_table_in(sink.kind))

    def _one_pass(self, staged: DataFrame, query_id: str, batch_id: int) -> Written:
        """Every record in one Spark job per sink; the first sink's tasks write dead letters."""
        ctx = self.ctx
        frame = self.one_pass.frame(staged)
        written = Written()
        for index, sink in enumerate(ctx.spec.sinks):
            query = self.queries.get(sink.name)
            rows = frame if query is None else query.frame(frame, carry_dead_letters=index == 0)
            dead = self._letters_of(index, sink)
            self._write_summed(written, rows, sink, query_id, batch_id, dead)
        return written

    def _write_summed(
        self,
        written: Written,
        rows: DataFrame,
        sink: SinkSpec,
        query_id: str,
        batch_id: int,
        dead_letters: TableWriter | None = None,
    ) -> None:
        """Write one sink's rows into ``written``, with the sums of its sum columns when it
        declares any (None when its tasks stored fewer rows than were summed: refusals)."""
        summed = batch_sums(rows, sink) if sink.target.sum_columns else None
        stored = 0
        for s, gid, count, dl in self._write_sink(
            rows, sink.name, query_id, batch_id, dead_letters
        ):
            written.prepared.append(Prepared(s, gid, count))
            written.dead_letters += dl
            stored += count
        if summed is not None:
            sums, expected = summed
            written.sums[sink.name] = sums if stored == expected else None

    def _isolating(self, staged: DataFrame, query_id: str, batch_id: int) -> Written:
        """The slow path: poison records, transform failures and unstorable rows found first."""
        ctx = self.ctx
        with_ids = staged.withColumn(ROW_ID, F.monotonically_increasing_id()).persist()
        try:
            poison = [
                (r[0] or "", r[1])
                for r in with_ids.filter(F.col(ERROR).isNotNull()).select(RAW, ERROR).collect()
            ]
            valid = with_ids.filter(F.col(ERROR).isNull()).drop(ERROR)
            out, failed = self.transform.run(valid)
            cached = [out]
            storable, unstorable = split_unstorable(out, self.keys, self.adds)
            written = Written()
            dead = poison + failed + unstorable
            for sink in ctx.spec.sinks:
                rows = storable
                query = self.queries.get(sink.name)
                if query is not None:
                    rows, letters, made = query.isolate(storable)
                    cached.append(made)
                    dead += letters
                self._write_summed(written, rows, sink, query_id, batch_id)
            written.prepared.append(self._write_dead_letters(dead, query_id, batch_id))
            written.dead_letters += len(dead)
            for frame in cached:
                frame.unpersist()
            return written
        finally:
            with_ids.unpersist()

    def _write_sink(
        self,
        frame: DataFrame,
        sink: str,
        query_id: str,
        batch_id: int,
        dead_letters: TableWriter | None = None,
    ) -> list[tuple[str, str, int, int]]:
        ctx = self.ctx
        writer = ctx.writers[sink]
        sink_spec = next(s for s in ctx.spec.sinks if s.name == sink)
        spec = sink_spec.target
        if spec.audit_column is not None:
            frame = frame.withColumn(spec.audit_column, F.lit(batch_id).cast("bigint"))
        present = frame.columns
        wanted = [*writer.columns, *[c for c in (DL_RAW, DL_REASON) if c in present]]
        if wanted != present:  # each select is analysed in the JVM: skip the no-op one
            frame = frame.select(*wanted)
        if spec.mode != "append":
            # Keyed modes: one task per key, or two tasks' merges would wait on each other's lock.
            frame = frame.repartition(spec.writer_partitions, *spec.key_columns)
        else:
            # Append needs no shuffle: a narrow coalesce bounds the participants (and is a
            # no-op when the input has fewer partitions).
            frame = frame.coalesce(spec.writer_partitions)
        task = WriterTask(
            writer=writer,
            pipeline=ctx.pipeline,
            query_id=query_id,
            sink=sink,
            epoch=ctx.epoch,
            batch_id=batch_id,
            two_phase=self.two_phase,
            driver_pid=os.getpid(),
            dead_letters=dead_letters,
            refused_table=(
                None
                if spec.on_refused_record == "fail"
                else ctx.spec.dead_letter_table_in(sink_spec.kind)
            ),
        )
        watching = (
            contextlib.nullcontext()
            if ctx.failed_attempts is None
            else ctx.failed_attempts.watching(task)
        )
        with watching:
            jvm = self._jvm_writer(sink, writer, frame)
            if jvm is not None:
                results = jvm.run(frame, task, wanted)
                if results is not None:
                    return results
            # One job (one UDF) per sink and query: its tasks take the batch id from their job.
            template = replace(task, batch_id=-1)
            job = self._jobs.get(template)
            if job is None:
                job = self._jobs[template] = ArrowWriteJob(arrow_task_writer(template))
            return job.run(frame, wanted, batch_id)

    def _jvm_writer(self, sink: str, writer: TableWriter, frame: DataFrame) -> JvmWriter | None:
        """The sink's JVM writer, chosen at its first batch (event ``writer``), or None."""
        if sink not in self._jvm:
            session = frame.sparkSession
            chosen = JvmWriter.choose(
                writer, self.ctx.jvm_ready, lambda name: jvm_has_class(session, name)
            )
            if isinstance(chosen, str):
                logs.event("writer", sink=sink, path="python", reason=chosen)
                self._jvm[sink] = None
            else:
                logs.event("writer", sink=sink, path="jvm")
                self._jvm[sink] = chosen
        return self._jvm[sink]

    def _write_dead_letters(
        self, rows: list[tuple[str, str]], query_id: str, batch_id: int
    ) -> Prepared:
        ctx = self.ctx
        gid = ctx.coordinator.gid(query_id, DEAD_LETTER_SINK, batch_id, 0, 0)
        records = [
            (ctx.pipeline, batch_id, storable_text(raw), storable_text(reason))
            for raw, reason in rows
        ]
        count = ctx.dead_letters.write(
            records, gid=gid if self.two_phase else None, pipeline=ctx.pipeline, batch_id=batch_id
        )
        return Prepared(DEAD_LETTER_SINK, gid, count)
