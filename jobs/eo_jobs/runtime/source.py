"""Streaming sources, parsed against the declared schema with poison records kept aside.

Every source yields one DataFrame with the declared columns plus ``_eo_raw`` (the record as
text) and ``_eo_error`` (why it could not be parsed, or NULL). Nothing is dropped: a record
that does not parse is routed to the dead-letter table by the batch writer.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from eo_jobs.spec.models import FilesSource, KafkaSource, PipelineSpec

CORRUPT = "_eo_corrupt"
RAW = "_eo_raw"
ERROR = "_eo_error"


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


def _files(spark: SparkSession, src: FilesSource) -> DataFrame:
    schema = _struct(src.schema_)
    reader = spark.readStream.options(**src.options)
    if src.max_files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", src.max_files_per_trigger)
    if src.format == "parquet":
        df = reader.schema(schema).parquet(src.path)
        return df.select(
            "*", F.lit(None).cast("string").alias(RAW), F.lit(None).cast("string").alias(ERROR)
        )
    # Spark's own readers keep a record that does not match the schema, as text, in the
    # corrupt-record column (and only such records): the raw text a dead letter needs, at
    # about half the cost of reading lines as text and parsing them with from_json.
    reader = (
        reader.option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .schema(_with_corrupt(schema))
    )
    df = (
        reader.option("header", "true").csv(src.path)
        if src.format == "csv"
        else reader.json(src.path)
    )
    error = F.when(
        F.col(CORRUPT).isNotNull(),
        F.lit(f"does not parse as {src.format} with the declared schema"),
    )
    return df.select(
        *[F.col(f.name) for f in schema.fields], F.col(CORRUPT).alias(RAW), error.alias(ERROR)
    )


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
