"""``foreachBatch``: one micro-batch through the commit protocol.

Writer tasks are Spark tasks (``mapInArrow``): each prepares one transaction named by
(pipeline, query, sink, epoch, batch, partition, attempt) and hands back its gid; the driver
then writes the one decision for the batch and runs phase 2. Records that do not parse, that
make the SQL transform fail, or that no sink can store (a NUL character in text, a NULL upsert
key) go to the dead-letter table as one more participant of the same decision, so a replay
duplicates them no more than it duplicates good rows, and a poison record never stops the
pipeline.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, MapType, StringType, StructType

from eo_jobs.protocol.coordinator import BatchResult, Coordinator, Prepared
from eo_jobs.runtime.arrow_writer import write_with_arrow
from eo_jobs.runtime.failed_attempts import FailedAttempts
from eo_jobs.runtime.source import ERROR, RAW
from eo_jobs.runtime.task import WriterTask
from eo_jobs.sinks.postgres.writer import PostgresWriter
from eo_jobs.spec.models import Guarantee, PipelineSpec

log = logging.getLogger("eo.batch")

DEAD_LETTER_SINK = "eo-dead-letter"
"""Reserved participant name of the dead-letter table."""
DEAD_LETTER_COLUMNS = ("pipeline", "batch_id", "raw", "reason")
ROW_ID = "_eo_row"
UNSTORABLE = "_eo_unstorable"
NUL = "\u0000"
DATA_ERRORS = (
    "CAST_",
    "ARITHMETIC_OVERFLOW",
    "DIVIDE_BY_ZERO",
    "NUMERIC_",
    "INVALID_ARRAY_INDEX",
    "DATETIME_",
    "CANNOT_PARSE",
    "INVALID_FRACTION",
    "INVALID_INDEX",
    "BINARY_ARITHMETIC",
)


@dataclass
class BatchContext:
    """Everything a batch needs that does not change between batches."""

    spec: PipelineSpec
    pipeline: str
    epoch: int
    coordinator: Coordinator
    writers: dict[str, PostgresWriter]
    dead_letters: PostgresWriter
    checkpoint: str
    on_batch: Callable[[BatchResult, float], None] = lambda _r, _s: None
    on_failure: Callable[[BaseException], None] = lambda _e: None
    failed_attempts: FailedAttempts | None = None
    timings: dict[int, BatchResult] = field(default_factory=dict)
    in_batch: threading.Event = field(default_factory=threading.Event)


def _local(location: str) -> Path | None:
    if location.startswith("file://"):
        return Path(location[len("file://") :])
    if "://" in location:
        return None
    return Path(location)


def query_id_of(checkpoint: str) -> str:
    """The streaming query id stored in the checkpoint's metadata file."""
    folder = _local(checkpoint)
    if folder is None:
        raise RuntimeError("only local or file:// checkpoint locations are read directly")
    return str(json.loads((folder / "metadata").read_text().splitlines()[0])["id"])


def offsets_of(checkpoint: str, batch_id: int) -> list[Any] | None:
    """Source offsets Spark logged for ``batch_id`` before running it (None if unreadable)."""
    folder = _local(checkpoint)
    if folder is None:
        return None
    path = folder / "offsets" / str(batch_id)
    if not path.exists():
        return None
    lines = path.read_text().splitlines()[2:]
    return [json.loads(line) if line not in ("", "-") else None for line in lines]


def _is_data_error(exc: BaseException) -> bool:
    getter = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    condition = str(getter() or "") if callable(getter) else ""
    return any(condition.startswith(prefix) for prefix in DATA_ERRORS)


def _materialize(df: DataFrame) -> DataFrame:
    """Cache and compute every column (a bare count() would prune the failing expressions)."""
    cached = df.persist()
    try:
        cached.count()
    except BaseException:
        cached.unpersist()
        raise
    return cached


class TransformIsolation:
    """Apply the SQL transform; isolate rows that make it fail (by bisection) as dead letters."""

    def __init__(self, sql: str | None) -> None:
        self.sql = sql

    def _apply(self, df: DataFrame) -> DataFrame:
        if self.sql is None:
            return df.drop(ROW_ID, RAW)
        df.drop(ROW_ID, RAW).createOrReplaceTempView("source")
        return df.sparkSession.sql(self.sql)

    def run(self, valid: DataFrame) -> tuple[DataFrame, list[tuple[str, str]]]:
        """(transformed rows, [(raw, reason)] of rows the transform could not process)."""
        try:
            return _materialize(self._apply(valid)), []
        except PySparkException as exc:
            if not _is_data_error(exc):
                raise
            first_error = exc
        ids = sorted(r[0] for r in valid.select(ROW_ID).collect())
        bad: list[tuple[int, str]] = []
        self._bisect(valid, ids, bad)
        if not bad:
            raise first_error
        kept = valid.filter(~F.col(ROW_ID).isin([i for i, _ in bad]))
        out = _materialize(self._apply(kept))
        rows = {
            r[0]: r[1]
            for r in valid.filter(F.col(ROW_ID).isin([i for i, _ in bad]))
            .select(ROW_ID, RAW)
            .collect()
        }
        return out, [(rows.get(i) or "", reason) for i, reason in bad]

    def _bisect(self, df: DataFrame, ids: list[int], bad: list[tuple[int, str]]) -> None:
        if not ids:
            return
        part = df.filter(F.col(ROW_ID).between(ids[0], ids[-1]))
        try:
            _materialize(self._apply(part))
            return
        except PySparkException as exc:
            if not _is_data_error(exc):
                raise
            if len(ids) == 1:
                bad.append((ids[0], f"transform failed: {str(exc).splitlines()[0][:500]}"))
                return
        middle = len(ids) // 2
        self._bisect(df, ids[:middle], bad)
        self._bisect(df, ids[middle:], bad)


def _unstorable_reason(df: DataFrame, key_columns: set[str]) -> Column | None:
    """Why a row cannot be stored by any sink, or NULL; None when no column can be a problem.

    PostgreSQL text cannot hold U+0000 (COPY fails, the whole batch with it, forever), and a
    NULL upsert key never matches a unique index, so it would be inserted again by every batch.
    """
    reasons: list[Column] = []
    for column in df.schema.fields:
        name, kind = column.name, column.dataType
        if isinstance(kind, StringType):
            has_nul = F.instr(F.col(name), NUL) > 0
        elif isinstance(kind, (ArrayType, MapType, StructType)):
            has_nul = F.instr(F.to_json(F.col(name)), "\\u0000") > 0
        else:
            has_nul = None
        if has_nul is not None:
            reasons.append(
                F.when(
                    has_nul,
                    F.lit(
                        f"column {name} contains a NUL character (U+0000), which PostgreSQL "
                        "text cannot store; clean it in spec.transform.sql, e.g. "
                        f"replace({name}, char(0), '')"
                    ),
                )
            )
        if name in key_columns:
            reasons.append(
                F.when(
                    F.col(name).isNull(),
                    F.lit(
                        f"upsert key column {name} is NULL: a unique index never matches NULL, "
                        "so the row would be inserted again by every batch"
                    ),
                )
            )
    return F.coalesce(*reasons) if reasons else None


def split_unstorable(
    df: DataFrame, key_columns: set[str]
) -> tuple[DataFrame, list[tuple[str, str]]]:
    """(rows every sink can store, [(row as JSON, reason)] of the others)."""
    reason = _unstorable_reason(df, key_columns)
    if reason is None:
        return df, []
    flagged = df.withColumn(UNSTORABLE, reason)
    columns = [F.col(c) for c in df.columns]
    bad = [
        (str(r[0]), str(r[1]))
        for r in flagged.filter(F.col(UNSTORABLE).isNotNull())
        .select(F.to_json(F.struct(*columns)), F.col(UNSTORABLE))
        .collect()
    ]
    if not bad:
        return df, []
    return flagged.filter(F.col(UNSTORABLE).isNull()).drop(UNSTORABLE), bad


def storable_text(text: str) -> str:
    """Dead-letter text PostgreSQL accepts: NUL characters spelled ``\\u0000``."""
    return text.replace(NUL, "\\u0000")


class ForeachBatch:
    """The callable given to ``writeStream.foreachBatch``."""

    def __init__(self, ctx: BatchContext) -> None:
        self.ctx = ctx
        self.transform = TransformIsolation(ctx.spec.transform.sql if ctx.spec.transform else None)
        self.two_phase = ctx.spec.guarantee == Guarantee.EXACTLY_ONCE

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        self.ctx.in_batch.set()
        try:
            self._batch(df, batch_id)
        except BaseException as exc:
            self.ctx.on_failure(exc)
            raise
        finally:
            self.ctx.in_batch.clear()

    def _batch(self, df: DataFrame, batch_id: int) -> None:
        ctx = self.ctx
        started = time.perf_counter()
        query_id = query_id_of(ctx.checkpoint)
        offsets = offsets_of(ctx.checkpoint, batch_id)
        decision = ctx.coordinator.begin(query_id, batch_id, offsets)
        if decision is not None:
            print(
                json.dumps(
                    {
                        "event": "replay",
                        "batch": batch_id,
                        "decided_by_epoch": decision.epoch,
                        "rows": decision.rows_written,
                    }
                ),
                flush=True,
            )
            return
        try:
            prepared = self._prepare(df, query_id, batch_id)
        except BaseException as exc:
            ctx.coordinator.abandon(batch_id, f"{type(exc).__name__}: {exc}"[:2000], query_id)
            raise
        prepare_ms = (time.perf_counter() - started) * 1000.0
        if self.two_phase:
            result = ctx.coordinator.decide_and_commit(
                query_id, batch_id, prepared, offsets, prepare_ms
            )
        else:
            result = ctx.coordinator.record(query_id, batch_id, prepared, offsets, prepare_ms)
        ctx.timings[batch_id] = result
        ctx.on_batch(result, time.perf_counter() - started)

    def _prepare(self, df: DataFrame, query_id: str, batch_id: int) -> list[Prepared]:
        ctx = self.ctx
        staged = df.withColumn(ROW_ID, F.monotonically_increasing_id()).persist()
        try:
            poison = [
                (r[0] or "", r[1])
                for r in staged.filter(F.col(ERROR).isNotNull()).select(RAW, ERROR).collect()
            ]
            valid = staged.filter(F.col(ERROR).isNull()).drop(ERROR)
            out, failed = self.transform.run(valid)
            keys = {
                k
                for s in ctx.spec.sinks
                if s.postgres.mode == "upsert"
                for k in s.postgres.key_columns
            }
            storable, unstorable = split_unstorable(out, keys)
            prepared: list[Prepared] = []
            for sink in ctx.spec.sinks:
                prepared.extend(self._write_sink(storable, sink.name, query_id, batch_id))
            prepared.append(
                self._write_dead_letters(poison + failed + unstorable, query_id, batch_id)
            )
            out.unpersist()
            return prepared
        finally:
            staged.unpersist()
            if ctx.failed_attempts is not None:
                ctx.failed_attempts.clear()

    def _write_sink(
        self, out: DataFrame, sink: str, query_id: str, batch_id: int
    ) -> list[Prepared]:
        ctx = self.ctx
        writer = ctx.writers[sink]
        spec = next(s for s in ctx.spec.sinks if s.name == sink).postgres
        frame = out.select(*writer.columns)
        if spec.mode == "upsert":
            frame = frame.repartition(spec.writer_partitions, *spec.key_columns)
        else:
            frame = frame.repartition(spec.writer_partitions)
        task = WriterTask(
            writer=writer,
            pipeline=ctx.pipeline,
            query_id=query_id,
            sink=sink,
            epoch=ctx.epoch,
            batch_id=batch_id,
            two_phase=self.two_phase,
            driver_pid=os.getpid(),
        )
        if ctx.failed_attempts is not None:
            ctx.failed_attempts.watch(task)
        results = write_with_arrow(frame, task)
        return [Prepared(s, gid, count) for s, gid, count in results]

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
