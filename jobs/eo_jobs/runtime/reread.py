"""A batch with a record that does not parse: its first pass fails, and it is read again.

A file source is streamed with ``mode=FAILFAST`` and no corrupt-record column
(``source._files``): keeping that column makes Spark's parser copy every good row field by
field, a cost every batch paid for the rare record that does not parse (~4 % of a
200,000-row cycle, bench/README.md). A Kafka source's ``from_json``/``from_csv`` likewise
(``source._kafka``), which also spares carrying every record's text to the writer. A batch that
has such a record fails its first pass (Spark's MALFORMED_RECORD_IN_PARSING) before anything of
it is decided; the driver rolls back what the pass prepared, and reads the batch again, keeping
the record aside as a dead letter: its files named by the checkpoint's source log
(``source.files_batch``), or its Kafka offsets, from the checkpoint's offset log
(``source.kafka_batch``). Only such a batch
pays for a second read; ``ReadPolicy`` keeps input whose malformed records keep coming from
paying for it every batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from py4j.protocol import Py4JError  # type: ignore[import-untyped]
from pyspark.sql import DataFrame, SparkSession

from eo_jobs.runtime.checkpoint import CheckpointLog, KafkaOffsets
from eo_jobs.runtime.source import files_batch, kafka_batch
from eo_jobs.spec.models import FilesSource, Guarantee, KafkaSource, PipelineSpec

MAX_PATIENCE = 64
"""The most clean batches in a row ``ReadPolicy`` waits for before it tries the fast pass again."""
MALFORMED = "MALFORMED_RECORD_IN_PARSING"
"""Spark's condition for a record that does not parse in FAILFAST mode (any subclass)."""


def _java_throwable(exc: BaseException) -> Any:
    """The JVM exception behind a Py4J or PySpark error, or None."""
    return getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)


def is_malformed(exc: BaseException) -> bool:
    """Whether Spark failed because a record does not parse (FAILFAST), at any depth of causes.

    A task's failure reaches the driver wrapped (FAILED_READ_FILE, then the job's abort), so the
    JVM cause chain is walked; a cause that is not a Spark error has no condition.
    """
    throwable = _java_throwable(exc)
    while throwable is not None:
        try:
            condition = throwable.getCondition()
        except Py4JError:
            condition = None
        if condition is not None and str(condition).startswith(MALFORMED):
            return True
        throwable = throwable.getCause()
    return False


class Reread:
    """Reads one batch again, keeping records that do not parse aside."""

    @classmethod
    def of(
        cls,
        spark: SparkSession,
        spec: PipelineSpec,
        checkpoint: CheckpointLog,
        secrets: Mapping[str, str] | None = None,
    ) -> Reread | None:
        """For a source whose stream fails on a record that does not parse: a file source of a
        text format (parquet has nothing to parse) or an exactly-once pipeline's Kafka source
        (``source._kafka``; ``secrets``: the values of its ``secretOptions``, as the stream
        has them)."""
        files = spec.source.files
        if files is not None:
            return None if files.format == "parquet" else FilesReread(spark, files, checkpoint)
        if spec.source.kafka is None or spec.guarantee != Guarantee.EXACTLY_ONCE:
            return None
        return KafkaReread(spark, spec.source.kafka, checkpoint, dict(secrets or {}))

    def extent(self, batch_id: int) -> dict[str, int]:
        """What the batch is read from, for the ``reread`` event (e.g. its number of files)."""
        raise NotImplementedError

    def frame(self, batch_id: int) -> DataFrame:
        """The batch's records with the stream's columns, malformed ones with their text."""
        raise NotImplementedError


class FilesReread(Reread):
    """A file source's batch, from the files the checkpoint logged for it."""

    def __init__(self, spark: SparkSession, source: FilesSource, checkpoint: CheckpointLog):
        self._spark = spark
        self._source = source
        self._checkpoint = checkpoint

    def files(self, batch_id: int) -> list[str]:
        """The files of ``batch_id``, as Spark logged them before running it."""
        return self._checkpoint.source_files(batch_id)

    def extent(self, batch_id: int) -> dict[str, int]:
        return {"files": len(self.files(batch_id))}

    def frame(self, batch_id: int) -> DataFrame:
        return files_batch(self._spark, self._source, self.files(batch_id))


class KafkaReread(Reread):
    """A Kafka source's batch, from the offsets the checkpoint logged around it."""

    def __init__(
        self,
        spark: SparkSession,
        source: KafkaSource,
        checkpoint: CheckpointLog,
        secrets: dict[str, str],
    ):
        self._spark = spark
        self._source = source
        self._checkpoint = checkpoint
        self._secrets = secrets
        self._range: tuple[int, tuple[KafkaOffsets, KafkaOffsets]] | None = None

    def _offsets(self, batch_id: int) -> tuple[KafkaOffsets, KafkaOffsets]:
        """The offsets ``batch_id`` starts from and ends before (``CheckpointLog.kafka_range``),
        read from the checkpoint once for the batch: the driver asks for its ``extent``, then its
        ``frame``, and Spark logged both ends before the batch ran, so they cannot change."""
        if self._range is None or self._range[0] != batch_id:
            self._range = (batch_id, self._checkpoint.kafka_range(batch_id))
        return self._range[1]

    def extent(self, batch_id: int) -> dict[str, int]:
        start, end = self._offsets(batch_id)
        records = sum(
            max(offset - max(start[t][p], 0), 0)
            for t, partitions in end.items()
            for p, offset in partitions.items()
        )
        return {"partitions": sum(len(p) for p in end.values()), "records": records}

    def frame(self, batch_id: int) -> DataFrame:
        start, end = self._offsets(batch_id)
        return kafka_batch(self._spark, self._source, self._secrets, start, end)


@dataclass
class ReadPolicy:
    """Whether a batch tries the fast pass first, or is read with the corrupt-record column.

    A fast pass that meets a malformed record costs its batch several times a batch's time
    (Spark retries the failing task before the job fails, then the batch is read again), so
    after one the next batches are read with the column at once, until ``patience`` of them in
    a row had no dead letter. ``patience`` doubles (up to 64) each time the fast pass fails, so
    input with a malformed record every few batches settles on the column, and clean input
    keeps the fast pass.
    """

    patience: int = 1
    left: int = 0
    """Batches still to be read with the column before the fast pass is tried again."""

    def fast_first(self) -> bool:
        """Whether the next batch tries the fast pass."""
        return self.left == 0

    def failed(self) -> None:
        """The fast pass met a malformed record (the batch is then read with the column)."""
        self.patience = min(self.patience * 2, MAX_PATIENCE)

    def read_with_column(self, dead_letters: int) -> None:
        """A batch was read with the column and gave ``dead_letters``."""
        self.left = self.patience if dead_letters else max(self.left - 1, 0)
