"""In-process Spark sessions for tests that each get their own JVM.

PySpark keeps one JVM per Python process: after ``SparkSession.stop()`` the gateway stays up
and the next ``getOrCreate()`` reuses it. Jars given as ``spark.jars`` reach the driver's class
path only when that JVM is launched, so a module that needs the Kafka connector fails with
"Failed to find data source: kafka" when another module on the same pytest-xdist worker
started Spark first. Each session made here shuts its JVM down when the module is done, so
the next one starts with exactly the configuration it asked for.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession

from bench import fast_jvm


@contextmanager
def own_jvm_session(app_name: str, master: str, conf: Mapping[str, str]) -> Iterator[SparkSession]:
    """A session on a JVM launched for it, shut down (JVM included) on exit."""
    _shutdown_jvm()
    builder = SparkSession.builder.master(master).appName(app_name)
    # Short-lived test JVMs start faster on the C1 compiler and a class archive (bench.fast_jvm).
    for key, value in {"spark.driver.extraJavaOptions": fast_jvm.java_options(), **conf}.items():
        builder = builder.config(key, value)
    # Python workers run this interpreter, as eo's drivers run theirs: PySpark reads the
    # variable when the context starts (``spark.pyspark.python`` alone does not reach it).
    previous = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    try:
        session = builder.getOrCreate()
    finally:
        if previous is None:
            del os.environ["PYSPARK_PYTHON"]
        else:
            os.environ["PYSPARK_PYTHON"] = previous
    try:
        yield session
    finally:
        session.stop()
        _shutdown_jvm()


@contextmanager
def local_session(app_name: str, conf: Mapping[str, str] | None = None) -> Iterator[SparkSession]:
    """``local[1]`` on its own JVM, no UI, one shuffle partition, plus ``conf``."""
    base = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "1"}
    with own_jvm_session(app_name, "local[1]", {**base, **(conf or {})}) as session:
        yield session


def _shutdown_jvm() -> None:
    """Stop the process's Spark JVM, if any, so the next session launches a fresh one."""
    active = SparkContext._active_spark_context
    if active is not None:
        active.stop()
    gateway = SparkContext._gateway
    if gateway is None:
        return
    gateway.shutdown()
    process = getattr(gateway, "proc", None)
    if process is not None:
        # The gateway JVM exits when its stdin closes (PythonGatewayServer watches for EOF).
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
    SparkContext._gateway = None
    SparkContext._jvm = None


@contextmanager
def kafka_session(app_name: str) -> Iterator[SparkSession]:
    """``local[2]`` with Spark's Kafka connector on its class path (fetch-jars.sh's jars), on
    its own JVM: ``spark.jars`` reach the driver's class path only when its JVM starts."""
    from eo_jobs.runtime.packages import kafka_connector_jars

    conf = {
        "spark.jars": ",".join(str(jar) for jar in kafka_connector_jars()),
        "spark.driver.memory": "1g",
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
    }
    with own_jvm_session(app_name, "local[2]", conf) as session:
        yield session


@contextmanager
def writer_session(app_name: str) -> Iterator[SparkSession]:
    """``local[2]`` with eo's JVM writer (and its JDBC drivers) on its class path, on its own
    JVM, its session time zone UTC: the JVM writer tests of each sink compare its rows with the
    Python writer's, so both must read timestamps in the same zone."""
    from eo_jobs.runtime.packages import writer_jars

    jars = writer_jars()
    assert not isinstance(jars, str), jars  # ./dev setup builds it
    conf = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "1",
        "spark.sql.session.timeZone": "UTC",
        "spark.jars": ",".join(str(jar) for jar in jars),
    }
    with own_jvm_session(app_name, "local[2]", conf) as session:
        yield session


def dead_letter_frame(spark: SparkSession) -> DataFrame:
    """One partition of ids with the batch's own dead letters beside them (eo's ``DL_RAW`` and
    ``DL_REASON`` columns, as a sink with a dead-letter table gets its batch): a row with both,
    one with a reason only and no id, and rows with neither; the raw text holds a NUL, a tab, a
    backslash and a newline, which each sink's writer must carry as they are."""
    from eo_jobs.sinks.postgres.arrow_copy import DL_RAW, DL_REASON

    return (
        spark.sql(
            f"""SELECT * FROM VALUES
          (1, NULL, NULL),
          (2, 'raw\\u0000with nul\\tand tab\\\\ and\\nnewline', 'does not parse'),
          (3, NULL, NULL),
          (NULL, NULL, 'reason only')
        AS t(id, {DL_RAW}, {DL_REASON})"""
        )
        .selectExpr("CAST(id AS BIGINT) AS id", DL_RAW, DL_REASON)
        .coalesce(1)
    )
