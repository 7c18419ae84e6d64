"""A sink's own query (``sinks[].transform.sql``) over the pipeline's output rows of a batch.

One pipeline can write the ledger rows to one table and per-key aggregates of the same rows to
another (``mode: accumulate``), under the batch's one decision. The view ``source`` holds the
pipeline's output (after ``spec.transform``) minus its dead letters. The query's rows carry the
two dead-letter columns like the pipeline's frame: a row this sink cannot store (a NULL key or
addend, a NUL character) is a dead letter of this sink, written by its own writer tasks into
the dead-letter table of its database. The first sink's frame also carries the pipeline's dead
letters, so they are written once, whichever sink has a query.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from eo_jobs.runtime.isolation import ROW_ID, TransformIsolation, apply_transform
from eo_jobs.runtime.one_pass import flagged, with_letters
from eo_jobs.runtime.poison import split_unstorable
from eo_jobs.runtime.source import RAW
from eo_jobs.sinks.postgres.arrow_copy import DL_RAW, DL_REASON
from eo_jobs.spec.models import SinkSpec


@dataclass(frozen=True)
class SinkQuery:
    """What one sink writes of a batch, when it has its own query."""

    sink: str
    sql: str
    key_columns: frozenset[str]
    add_columns: frozenset[str]

    @classmethod
    def of(cls, sink: SinkSpec) -> SinkQuery | None:
        """The sink's query, or None when it writes the pipeline's output as is."""
        if sink.transform is None:
            return None
        keyed = sink.target.mode != "append"
        return cls(
            sink.name,
            sink.transform.sql,
            frozenset(sink.target.key_columns if keyed else ()),
            frozenset(sink.target.add_columns),
        )

    def frame(self, pipeline_frame: DataFrame, carry_dead_letters: bool) -> DataFrame:
        """The query over the good rows of the one-pass frame, with its dead-letter columns;
        ``carry_dead_letters``: plus the pipeline's own dead letters (the first sink)."""
        good = pipeline_frame.filter(F.col(DL_REASON).isNull()).drop(DL_RAW, DL_REASON)
        out = flagged(apply_transform(good, self.sql), set(self.key_columns), self.add_columns)
        if not carry_dead_letters:
            return out
        letters = pipeline_frame.filter(F.col(DL_REASON).isNotNull())
        return with_letters(out, letters, DL_RAW, DL_REASON)

    def isolate(self, storable: DataFrame) -> tuple[DataFrame, list[tuple[str, str]], DataFrame]:
        """The slow path (``batch.ForeachBatch._isolating``): the query over rows every sink
        can store, rows it fails on and rows of its output this sink cannot store set aside as
        dead letters, named by the sink: (rows to write, dead letters, the cached frame the
        rows come from, to unpersist after the write)."""
        with_ids = storable.withColumn(ROW_ID, F.monotonically_increasing_id()).withColumn(
            RAW, F.lit(None).cast("string")
        )
        out, failed = TransformIsolation(self.sql).run(with_ids)
        kept, unstorable = split_unstorable(out, set(self.key_columns), self.add_columns)
        letters = [(raw, f"sink {self.sink}: {reason}") for raw, reason in failed + unstorable]
        return kept, letters, out
