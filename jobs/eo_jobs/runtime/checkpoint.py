"""The files of Spark's checkpoint that eo reads, wherever it lives.

The query id (``metadata``) ties the checkpoint to the decision log, so a lost or replaced
checkpoint is refused instead of replayed; the offsets Spark logged for a batch (``offsets/N``)
are recorded with its decision; the files a file source read in a batch (``sources/0/N``), or the
Kafka offsets a batch starts from (the previous batch's, or ``sources/0/0`` for the first), are
how a batch with a malformed record is read again (``runtime.reread``). A local folder is read
directly; any other URI (``s3a://``, ``gs://``, ``abfs://``, ``hdfs://``) through the Hadoop
FileSystem of the Spark session, the same file system and settings Spark itself writes the
checkpoint with.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

Reader = Callable[[str], str | None]
"""Text of the file at a location, or None when there is no such file."""
KafkaOffsets = dict[str, dict[str, int]]
"""Offsets of a Kafka source: topic -> partition (as Spark's JSON names it) -> offset."""


class UnreadableCheckpointError(RuntimeError):
    """A checkpoint file eo needs is missing: its metadata (nothing can be decided without the
    query id) or a batch's file list (a malformed record could not be set aside)."""


class CheckpointLog:
    """Reads a checkpoint's query id and per-batch offsets."""

    def __init__(self, location: str, read: Reader) -> None:
        self.location = location.rstrip("/")
        self._read = read
        self._query_id: str | None = None

    @classmethod
    def of(cls, location: str, spark: SparkSession) -> CheckpointLog:
        """Local folders read directly, every other URI through Spark's Hadoop FileSystem."""
        folder = local_path(location)
        if folder is not None:
            return cls(str(folder), _read_local)
        return cls(location, _hadoop_reader(spark))

    def query_id(self) -> str:
        """The streaming query id in ``metadata`` (fixed for the checkpoint's life: cached)."""
        if self._query_id is None:
            text = self._read(f"{self.location}/metadata")
            if not text:
                raise UnreadableCheckpointError(
                    f"no metadata file in checkpoint {self.location}: Spark writes it when the "
                    "query starts"
                )
            self._query_id = str(json.loads(text.splitlines()[0])["id"])
        return self._query_id

    def committed(self, batch_id: int) -> bool:
        """Whether Spark's commit log holds ``batch_id`` (written after ``foreachBatch``)."""
        return self._read(f"{self.location}/commits/{batch_id}") is not None

    def offsets(self, batch_id: int) -> list[Any] | None:
        """Source offsets Spark logged for ``batch_id`` before running it (None if absent)."""
        text = self._read(f"{self.location}/offsets/{batch_id}")
        if text is None:
            return None
        lines = text.splitlines()[2:]
        return [json.loads(line) if line not in ("", "-") else None for line in lines]

    def source_files(self, batch_id: int) -> list[str]:
        """The files (URIs) the query's file source read in ``batch_id``, as Spark logged them.

        The file source numbers a log of its own (``sources/0/K``, one JSON entry per file after
        a version line; every ``compactInterval``-th log is ``K.compact`` instead, holding every
        entry so far, each with its ``batchId`` K). It logs entry K as soon as it finds new
        files, before the query writes ``offsets/N``, so a driver killed between the two leaves
        an entry no query batch got, and query batch N then reads more than one entry. The
        entries of N are therefore those its offsets cover, as Spark's own ``getBatch`` reads
        them: ``offsets(N-1).logOffset < K <= offsets(N).logOffset``. The format is the
        checkpoint's own, so it stays readable across Spark versions.
        """
        end = self._log_offset(batch_id)
        if end is None:
            raise UnreadableCheckpointError(
                f"no offsets for batch {batch_id} in {self.location}/offsets: Spark logs them "
                "before the batch runs, so its files cannot be named"
            )
        start = self._log_offset(batch_id - 1) if batch_id > 0 else -1
        if start is None:
            raise UnreadableCheckpointError(
                f"no offsets for batch {batch_id - 1} in {self.location}/offsets: the files of "
                f"batch {batch_id} start after them"
            )
        return [path for entry in range(start + 1, end + 1) for path in self._entry(entry)]

    def kafka_range(self, batch_id: int) -> tuple[KafkaOffsets, KafkaOffsets]:
        """The Kafka offsets ``batch_id`` starts from and ends before, per topic and partition.

        The end is the batch's own ``offsets/N``; the start the previous batch's end, or, for
        the first batch, the initial offsets Spark's Kafka source logged in ``sources/0/0``
        (behind a version line and, from Spark 2.1's format, a leading NUL byte). A partition
        the end has and the start does not appeared between the two batches; Spark reads such a
        partition from its earliest offset, so the start says -2 (Kafka's "earliest").
        """
        end = self._kafka_offsets(self.offsets(batch_id))
        if end is None:
            raise UnreadableCheckpointError(
                f"no Kafka offsets for batch {batch_id} in {self.location}/offsets: Spark logs "
                "them before the batch runs, so its records cannot be named"
            )
        if batch_id > 0:
            before = self._kafka_offsets(self.offsets(batch_id - 1))
        else:
            text = self._read(f"{self.location}/sources/0/0")
            lines = [] if text is None else text.lstrip("\x00").splitlines()[1:]
            before = self._kafka_offsets([json.loads(lines[0])] if lines else None)
        if before is None:
            raise UnreadableCheckpointError(
                f"no Kafka offsets before batch {batch_id} in {self.location}: the batch's "
                "records start after them"
            )
        start = {
            topic: {p: before.get(topic, {}).get(p, -2) for p in partitions}
            for topic, partitions in end.items()
        }
        return start, end

    @staticmethod
    def _kafka_offsets(entries: list[Any] | None) -> KafkaOffsets | None:
        """The Kafka source's offsets of one log entry (``{topic: {partition: offset}}``)."""
        if not entries or not isinstance(entries[0], dict):
            return None
        try:
            return {
                str(topic): {str(p): int(o) for p, o in partitions.items()}
                for topic, partitions in entries[0].items()
            }
        except (AttributeError, TypeError, ValueError):
            return None

    def _log_offset(self, batch_id: int) -> int | None:
        """The file source's log offset Spark recorded as the end of ``batch_id``."""
        offsets = self.offsets(batch_id)
        if not offsets or not isinstance(offsets[0], dict) or "logOffset" not in offsets[0]:
            return None
        return int(offsets[0]["logOffset"])

    def _entry(self, entry: int) -> list[str]:
        """The files of the source log's entry ``entry`` (its own file, or a compacted one)."""
        folder = f"{self.location}/sources/0"
        text = self._read(f"{folder}/{entry}")
        if text is None:
            text = self._read(f"{folder}/{entry}.compact")
        if text is None:
            raise UnreadableCheckpointError(
                f"no file list for source log entry {entry} in {folder}: Spark logs it before "
                "the batch that reads it"
            )
        entries = [json.loads(line) for line in text.splitlines()[1:] if line.strip()]
        return [str(e["path"]) for e in entries if int(e["batchId"]) == entry]


def local_path(location: str) -> Path | None:
    """The folder a location names on this machine (a path or ``file://``), or None (a store)."""
    if location.startswith("file://"):
        return Path(location[len("file://") :])
    if "://" in location:
        return None
    return Path(location)


def _read_local(location: str) -> str | None:
    path = Path(location)
    return path.read_text(encoding="utf-8") if path.exists() else None


def _hadoop_reader(spark: SparkSession) -> Reader:
    """A reader on the JVM's Hadoop FileSystem, configured like the streaming query's."""
    jvm = spark._jvm
    if jvm is None:
        raise UnreadableCheckpointError("the Spark session has no JVM")
    conf = spark._jsparkSession.sessionState().newHadoopConf()

    def read(location: str) -> str | None:
        path = jvm.org.apache.hadoop.fs.Path(location)
        fs = path.getFileSystem(conf)
        if not fs.exists(path):
            return None
        stream = fs.open(path)
        try:
            return str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    return read
