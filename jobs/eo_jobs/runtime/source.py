"""Streaming sources, parsed against the declared schema with poison records kept aside.

Every source yields one DataFrame with the declared columns plus ``_eo_raw`` (the record as
text) and ``_eo_error`` (why it could not be parsed, or NULL). Nothing is dropped: a record
that does not parse is routed to the dead-letter table by the batch writer. The stream stops at
such a record instead (FAILFAST), and the batch that has one is read again by ``files_batch`` or
``kafka_batch``, which keep it aside (``runtime.reread`` says why).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, TypeVar
from urllib.parse import unquote

from pyspark.sql import Column, DataFrame, DataFrameReader, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.readwriter import DataStreamReader
from pyspark.sql.types import StringType, StructField, StructType

from eo_jobs.spec.models import FilesSource, Guarantee, KafkaSource, PipelineSpec

CORRUPT = "_eo_corrupt"
RAW = "_eo_raw"
ERROR = "_eo_error"
R = TypeVar("R", DataStreamReader, DataFrameReader)
FAILFAST = "FAILFAST"
KAFKA_READ_DEFAULTS = {
    "kafka.max.poll.records": "10000",
    "kafka.max.partition.fetch.bytes": str(4 * 1024 * 1024),
}
"""Kafka consumer settings eo reads with unless the pipeline's options set them.

Spark's reader takes a task's records through ``KafkaConsumer.poll``, which returns at most
``max.poll.records`` (Kafka's default 500) a call: 2,000 calls per million records, each with
the consumer's bookkeeping. Batch reads of 1,000,000 events from 4 partitions here took 5.2 s
with 10,000 per call and 8 MiB fetches against 6.8-8.8 s with Kafka's defaults (probe in
bench/README.md, "Kafka in"). A larger fetch per partition (1 MiB by default) halves the round
trips; it is held at 4 MiB because an idle cached consumer (Spark keeps up to 64 per executor)
may hold one prefetched response.
"""
STREAM_ONLY_KAFKA_OPTIONS = (
    "minoffsetspertrigger",
    "maxtriggerdelay",
    "startingoffsets",
    "startingtimestamp",
    "endingoffsets",
    "endingtimestamp",
)
"""Prefixes (lower case) of the user options of the stream that a batch read of the same topic
leaves out: what only a stream takes (``minOffsetsPerTrigger``, ``maxTriggerDelay``), and what
says where a read starts or ends, by offset or by time (``startingOffsetsByTimestamp`` and the
like). The stream may take the latter for where it starts; a batch read again by its logged
offsets must not: Spark prefers a timestamp option over the offsets given, which would read
another range than the batch's."""
GLOB_CHARACTERS = re.compile(r"[\\{}\[\]*?]")
"""Characters Hadoop's glob gives a meaning to in a reader path."""


def _struct(ddl: str) -> StructType:
    """A declared Spark DDL schema as a StructType."""
    parsed = StructType.fromDDL(ddl)
    if not isinstance(parsed, StructType):
        raise ValueError(f"schema {ddl!r} is not a list of columns")
    return parsed


def _with_corrupt(schema: StructType) -> StructType:
    return StructType([*schema.fields, StructField(CORRUPT, StringType(), True)])


def _parse(raw: Column, fmt: str, schema: StructType, mode: str = "PERMISSIVE") -> Column:
    """Parse the record's text; PERMISSIVE keeps a record that does not parse in the corrupt
    column, FAILFAST fails the task on it (and needs no such column)."""
    if mode == FAILFAST:
        options = {"mode": FAILFAST}
    else:
        options = {"mode": mode, "columnNameOfCorruptRecord": CORRUPT}
        schema = _with_corrupt(schema)
    if fmt == "json":
        return F.from_json(raw, schema, options)
    return F.from_csv(raw, schema.simpleString(), options)


def _split(parsed: DataFrame, schema: StructType, fmt: str) -> DataFrame:
    """Flatten the parsed struct; mark rows whose text did not match the schema."""
    fields = [F.col("p").getField(f.name).alias(f.name) for f in schema.fields]
    error = F.when(
        F.col("p").isNull() | F.col("p").getField(CORRUPT).isNotNull(),
        F.lit(f"does not parse as {fmt} with the declared schema"),
    )
    return parsed.select(*fields, F.col(RAW), error.alias(ERROR))


def _load(reader: DataStreamReader | DataFrameReader, src: FilesSource, path: Any) -> DataFrame:
    if src.format == "csv":
        return reader.option("header", "true").csv(path)
    return reader.json(path)


def _files(spark: SparkSession, src: FilesSource) -> DataFrame:
    """The stream: a text format is parsed with FAILFAST, without the corrupt-record column.

    With that column Spark's parser copies every good row field by field to add it (9 % of the
    writer tasks' JVM time, JFR), for the rare record that does not parse. A batch with such a
    record fails its first pass instead, and only that batch is read again by
    ``files_batch`` (``runtime.reread``).
    """
    schema = _struct(src.schema_)
    reader = spark.readStream.options(**src.options)
    if src.max_files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", src.max_files_per_trigger)
    reader = reader.schema(schema)
    if src.format == "parquet":
        df = reader.parquet(src.path)
    else:
        df = _load(reader.option("mode", "FAILFAST"), src, src.path)
    return df.select(
        "*", F.lit(None).cast("string").alias(RAW), F.lit(None).cast("string").alias(ERROR)
    )


def files_batch(spark: SparkSession, src: FilesSource, paths: list[str]) -> DataFrame:
    """The files of one batch read again, keeping every record that does not parse aside.

    Spark's own readers keep a record that does not match the schema, as text, in the
    corrupt-record column (and only such records): the raw text a dead letter needs, at about
    half the cost of reading lines as text and parsing them with from_json. ``paths``: the
    batch's files as the checkpoint logged them (URIs), read as named, never as patterns.
    """
    schema = _struct(src.schema_)
    reader = (
        spark.read.options(**src.options)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .schema(_with_corrupt(schema))
    )
    if not GLOB_CHARACTERS.search(src.path):
        # Partition columns of Hive-style folders (day=.../x.json) come from the path below the
        # source folder, as in the stream; files named alone would have none, and a declared
        # partition column would be read from the file's content instead.
        reader = reader.option("basePath", src.path)
    df = _load(reader, src, [literal_path(p) for p in paths])
    error = F.when(
        F.col(CORRUPT).isNotNull(),
        F.lit(f"does not parse as {src.format} with the declared schema"),
    )
    return df.select(
        *[F.col(f.name) for f in schema.fields], F.col(CORRUPT).alias(RAW), error.alias(ERROR)
    )


def literal_path(uri: str) -> str:
    """A logged file URI as a path Spark's batch reader takes literally.

    The log percent-encodes the path (``a%20b``), which a reader path must not be; and a reader
    expands glob characters, which a file name may hold (``a[1].json``): they are escaped.
    """
    return GLOB_CHARACTERS.sub(r"\\\g<0>", unquote(uri))


def kafka_options(
    src: KafkaSource, secrets: Mapping[str, str], streaming: bool = True
) -> dict[str, str]:
    """The Kafka reader's options besides what it reads: the brokers, eo's read defaults, the
    user's options (which may override those defaults) and its secrets; a batch read of the
    same topic leaves out what only a stream takes."""
    merged = {
        "kafka.bootstrap.servers": src.bootstrap_servers,
        **KAFKA_READ_DEFAULTS,
        **src.options,
        **secrets,
    }
    if streaming:
        return merged
    return {k: v for k, v in merged.items() if not k.lower().startswith(STREAM_ONLY_KAFKA_OPTIONS)}


def _kafka_reader(reader: R, src: KafkaSource, secrets: Mapping[str, str]) -> R:
    """A Kafka reader with ``kafka_options``."""
    streaming = isinstance(reader, DataStreamReader)
    return reader.format("kafka").options(**kafka_options(src, secrets, streaming))


def _kafka(
    spark: SparkSession, src: KafkaSource, secrets: Mapping[str, str], failfast: bool
) -> DataFrame:
    """The stream; with ``failfast``, parsed with FAILFAST and without the corrupt-record column.

    As for files (``_files``), the corrupt-record column makes Spark's parser copy every good
    row to add it, and the record's text would ride along every row to the writer, for the rare
    record that does not parse. A batch with such a record fails its first pass instead, and
    only that batch is read again by its offsets (``kafka_batch``). A record with no value
    (a tombstone) parses to nothing without failing: it is kept aside as it always was.
    Without two-phase commit a failed pass could not be undone (its tasks commit their own
    rows), so an at-least-once pipeline parses with the column, every batch read once.
    """
    schema = _struct(src.schema_)
    reader = (
        _kafka_reader(spark.readStream, src, secrets)
        .option("subscribe", ",".join(src.topics))
        .option("startingOffsets", src.starting_offsets)
        .option("failOnDataLoss", "true")
    )
    if src.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", src.max_offsets_per_trigger)
    text = reader.load().select(F.col("value").cast("string").alias(RAW))
    if not failfast:
        parsed = text.select(F.col(RAW), _parse(F.col(RAW), src.format, schema).alias("p"))
        return _split(parsed, schema, src.format)
    parsed = text.select(F.col(RAW), _parse(F.col(RAW), src.format, schema, FAILFAST).alias("p"))
    nothing = F.col("p").isNull()
    fields = [F.col("p").getField(f.name).alias(f.name) for f in schema.fields]
    error = F.when(nothing, F.lit(f"does not parse as {src.format} with the declared schema"))
    return parsed.select(*fields, F.when(nothing, F.col(RAW)).alias(RAW), error.alias(ERROR))


def kafka_batch(
    spark: SparkSession,
    src: KafkaSource,
    secrets: Mapping[str, str],
    start: Mapping[str, Mapping[str, int]],
    end: Mapping[str, Mapping[str, int]],
) -> DataFrame:
    """One batch's records read again by its offsets, keeping records that do not parse aside.

    The partitions are assigned exactly as the batch's end offsets name them (a subscription
    would take partitions added since, which the offsets do not cover, and Spark refuses
    offsets that do not name every partition it reads).
    """
    schema = _struct(src.schema_)
    raw = (
        _kafka_reader(spark.read, src, secrets)
        .option("assign", json.dumps({t: sorted(int(p) for p in ps) for t, ps in end.items()}))
        .option("startingOffsets", json.dumps(start))
        .option("endingOffsets", json.dumps(end))
        .option("failOnDataLoss", "true")
        .load()
        .select(F.col("value").cast("string").alias(RAW))
    )
    parsed = raw.select(F.col(RAW), _parse(F.col(RAW), src.format, schema).alias("p"))
    return _split(parsed, schema, src.format)


def read_source(
    spark: SparkSession, spec: PipelineSpec, secrets: Mapping[str, str] | None = None
) -> DataFrame:
    """The pipeline's input as a streaming DataFrame (declared columns + raw + error).

    ``secrets``: the values of ``spec.source.kafka.secretOptions``, resolved from the
    environment (``spec.kafka.secret_options``) before the session started.
    """
    if spec.source.files is not None:
        return _files(spark, spec.source.files)
    assert spec.source.kafka is not None
    failfast = spec.guarantee == Guarantee.EXACTLY_ONCE
    return _kafka(spark, spec.source.kafka, secrets or {}, failfast)
