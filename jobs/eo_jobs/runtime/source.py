"""Streaming sources, parsed against the declared schema with poison records kept aside.

Every source yields one DataFrame with the declared columns plus ``_eo_raw`` (the record as
text) and ``_eo_error`` (why it could not be parsed, or NULL). Nothing is dropped: a record
that does not parse is routed to the dead-letter table by the batch writer. A file source's
stream stops at such a record instead (FAILFAST), and the batch that has one is read again by
``files_batch``, which keeps it aside (``runtime.reread`` says why).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from pyspark.sql import Column, DataFrame, DataFrameReader, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.readwriter import DataStreamReader
from pyspark.sql.types import StringType, StructField, StructType

from eo_jobs.spec.models import FilesSource, KafkaSource, PipelineSpec

CORRUPT = "_eo_corrupt"
RAW = "_eo_raw"
ERROR = "_eo_error"
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


def _parse(raw: Column, fmt: str, schema: StructType) -> Column:
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    if fmt == "json":
        return F.from_json(raw, _with_corrupt(schema), options)
    return F.from_csv(raw, _with_corrupt(schema).simpleString(), options)


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


def _kafka(spark: SparkSession, src: KafkaSource, secrets: Mapping[str, str]) -> DataFrame:
    schema = _struct(src.schema_)
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", src.bootstrap_servers)
        .option("subscribe", ",".join(src.topics))
        .option("startingOffsets", src.starting_offsets)
        .option("failOnDataLoss", "true")
    )
    if src.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", src.max_offsets_per_trigger)
    for key, value in {**src.options, **secrets}.items():
        reader = reader.option(key, value)
    raw = reader.load().select(F.col("value").cast("string").alias(RAW))
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
    return _kafka(spark, spec.source.kafka, secrets or {})
