"""The baseline: a plain Structured Streaming job that writes with Spark's own JDBC writer.

What a Spark user writes without eo: read the files with the declared schema, and in
``foreachBatch`` call ``df.write.jdbc(..., mode="append")``. Each partition is one JDBC
transaction, committed by its task, so a failed or replayed batch can duplicate rows (at least
once). It borrows from eo only the Spark configuration of the pipeline file (master, cores,
memory, shuffle partitions), so that every variant of the bench runs the same Spark.

Run as ``python -m bench.spark_jdbc_job PIPELINE.yaml --url JDBC_URL --jars JAR,...``; prints one
JSON line per batch, ``{"event": "batch", "batch": N, "seconds": S}``, timed around the write.
The table and the writer tasks are the first sink's, ``postgres`` or ``mysql`` (into MariaDB:
``--driver org.mariadb.jdbc.Driver --user root``, Connector/J's options in the URL, and a larger
``--batch-size``; see ``bench/mysql_sink.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from eo_jobs.runtime.session import spark_conf
from eo_jobs.runtime.source import KAFKA_READ_DEFAULTS
from eo_jobs.spec import load_pipeline
from eo_jobs.spec.models import PipelineSpec


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench.spark_jdbc_job", description=__doc__)
    parser.add_argument("pipeline", type=Path, help="pipeline file: source, sink table, Spark")
    parser.add_argument("--url", required=True, help="JDBC URL of the sink database")
    parser.add_argument("--user", default="postgres", help="database user")
    parser.add_argument("--jars", required=True, help="comma-separated JDBC driver jars")
    parser.add_argument("--driver", default="org.postgresql.Driver", help="JDBC driver class")
    parser.add_argument(
        "--batch-size", type=int, help="Spark's JDBC batchsize (rows per executeBatch)"
    )
    return parser.parse_args(argv)


def stream(
    pipeline: Path,
    app: str,
    write: Callable[[PipelineSpec, DataFrame], None],
    extra_conf: dict[str, str] | None = None,
) -> int:
    """Read the pipeline's source as a stream (``availableNow``), ``write`` each batch, time it.

    Shared by the plain baselines so that they read exactly alike: the declared schema,
    ``maxFilesPerTrigger`` or ``maxOffsetsPerTrigger``, eo's Spark configuration; one
    ``{"event": "batch"}`` line per batch, timed around ``write``.
    """
    spec = load_pipeline(pipeline).spec
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    conf = spark_conf(spec, app)
    extra = dict(extra_conf or {})
    if "spark.jars" in conf and "spark.jars" in extra:  # eo's (the Kafka connector) and ours
        extra["spark.jars"] = conf["spark.jars"] + "," + extra["spark.jars"]
    for key, value in {**conf, **extra}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")

    def batch(df: DataFrame, batch_id: int) -> None:
        started = time.perf_counter()
        write(spec, df)
        seconds = time.perf_counter() - started
        print(json.dumps({"event": "batch", "batch": batch_id, "seconds": seconds}), flush=True)

    query = (
        _read(spark, spec)
        .writeStream.foreachBatch(batch)
        .option("checkpointLocation", spec.checkpoint.location)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()
    return 0


def _read(spark: SparkSession, spec: PipelineSpec) -> DataFrame:
    """The source as a plain Spark user reads it: the files with the declared schema, or the
    topic's values through ``from_json`` (Spark's own parser, as eo's Kafka source uses), with
    the consumer settings eo reads with (``KAFKA_READ_DEFAULTS``), so that a ratio to eo is
    the write path's, not Kafka's defaults'."""
    kafka = spec.source.kafka
    if kafka is not None:
        reader = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
            .option("subscribe", ",".join(kafka.topics))
            .option("startingOffsets", kafka.starting_offsets)
            .option("failOnDataLoss", "true")
            .options(**KAFKA_READ_DEFAULTS)
        )
        if kafka.max_offsets_per_trigger is not None:
            reader = reader.option("maxOffsetsPerTrigger", kafka.max_offsets_per_trigger)
        value = F.from_json(F.col("value").cast("string"), kafka.schema_)
        return reader.load().select(value.alias("v")).select("v.*")
    files = spec.source.files
    assert files is not None  # the spec has exactly one source
    reader = spark.readStream.schema(files.schema_)
    if files.max_files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", files.max_files_per_trigger)
    return reader.json(files.path)


def main(argv: list[str] | None = None) -> int:
    """Run the query to the end of the available files (``availableNow``)."""
    args = _parse(argv)
    properties = {"user": args.user, "driver": args.driver}
    if args.batch_size is not None:
        properties["batchsize"] = str(args.batch_size)

    def write(spec: PipelineSpec, df: DataFrame) -> None:
        first = spec.sinks[0]
        sink = first.postgres or first.mysql
        if sink is None:
            raise ValueError(f"sink {first.name}: the JDBC baseline writes postgres or mysql sinks")
        # As many writer tasks (JDBC connections) as eo's writerPartitions.
        df.repartition(sink.writer_partitions).write.jdbc(
            args.url, sink.table, mode="append", properties=properties
        )

    return stream(args.pipeline, "bench-spark-jdbc", write, {"spark.jars": args.jars})


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    # Leave the way `eo run` does (Spark stopped, then no waiting for stray JVM threads), so
    # wall times compare like work.
    os._exit(code)
