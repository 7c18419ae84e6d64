"""The ways the bench writes the same events, and how each one is started.

Every Spark variant reads the same files (or, with ``--source kafka``, the same topic with the
same ``maxOffsetsPerTrigger``) with the same schema, the same ``maxFilesPerTrigger``
and the same Spark configuration (taken from one pipeline file); the writing ones write through
as many concurrent writer tasks (``writerPartitions``). Only the write path differs. Two
variants are ceilings rather than alternatives: ``spark-noop`` is Spark reading and parsing the
batch and throwing it away (what the engine costs before any write), ``copy`` is PostgreSQL's
``COPY`` of the same rows from a CSV file without Spark (what the database can take).
``exactly-once-mysql`` and ``spark-jdbc-mysql`` (issue 29) are eo's MySQL sink and Spark's JDBC
writer into the bench's MariaDB (``bench/mysql_sink.py``); eo's control database stays the
run's PostgreSQL database (``spec.control``).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.data import SCHEMA_DDL
from bench.kafka_input import KafkaTopic
from bench.mysql_sink import JDBC_BATCH_SIZE
from eo_jobs.runtime.packages import COMPLETE_STAMP, eo_cache

REPO = Path(__file__).resolve().parents[1]
DSN_ENV = "BENCH_DSN"
MYSQL_DSN_ENV = "BENCH_MYSQL_DSN"
"""The MySQL variants' sink DSN (``mysql://...``), for ``sinks[].mysql.dsn``."""
TABLE = "public.orders"
KEYED_TABLE = "public.orders_by_id"
"""The upsert variant's table: ``order_id`` is its primary key (``ON CONFLICT`` needs one)."""
TOTALS_TABLE = "public.merchant_daily_volume"
"""The accumulate variant's second sink: per-merchant daily running totals."""
TOTALS_SQL = (
    "SELECT merchant, to_date(created_at) AS day, "
    "CAST(sum(amount_cents) AS DECIMAL(20, 0)) AS volume_cents, count(*) AS payments "
    "FROM source GROUP BY merchant, to_date(created_at)"
)
"""The totals sink's own query over each batch's rows (``sinks[].transform``)."""
VERSIONS = REPO / "tools" / "jars" / "versions.properties"


@dataclass(frozen=True)
class Variant:
    """One write path under test."""

    name: str
    kind: str
    """``eo`` (``eo run``), ``jdbc`` / ``noop`` (plain Spark jobs), ``copy`` (no Spark)."""
    guarantee: str
    """What it promises: ``spec.guarantee`` of its pipeline file for eo."""
    meaning: str
    mode: str = "append"
    """``append`` or ``upsert`` (keyed by ``order_id``)."""
    totals: bool = False
    """A second sink beside the table: per-merchant daily totals (``mode: accumulate``)."""
    sums: bool = False
    """The table declares ``sumColumns: [amount_cents]``: each batch's sum stored with its
    decision, for the audit."""
    database: str = "postgres"
    """The sink's database: ``postgres`` (the bench's PostgreSQL) or ``mysql`` (its MariaDB)."""
    label: str = ""
    """The name in the report's tables when it is not ``name`` (a command-line name has no
    spaces)."""

    @property
    def display(self) -> str:
        """How the report names it."""
        return self.label or self.name

    @property
    def two_phase(self) -> bool:
        """Whether the variant promises exactly-once (its audit must be exact)."""
        return self.guarantee == "exactly-once"

    @property
    def spark(self) -> bool:
        """Whether a Spark driver runs it (everything but the raw ``COPY``)."""
        return self.kind != "copy"

    @property
    def writes(self) -> bool:
        """Whether rows reach the table (``noop`` throws them away, so there is no audit)."""
        return self.kind != "noop"

    @property
    def table(self) -> str:
        """The sink table of its PostgreSQL run (a MySQL run's is ``bench.mysql_sink``'s)."""
        return KEYED_TABLE if self.mode == "upsert" else TABLE


VARIANTS = (
    Variant(
        "exactly-once",
        "eo",
        "exactly-once",
        "eo run, fenced 2PC: Arrow batches -> CSV COPY + PREPARE per task, one decision per batch",
    ),
    Variant(
        "at-least-once",
        "eo",
        "at-least-once",
        "eo run, each writer task COPYs and commits on its own",
    ),
    Variant(
        "idempotent",
        "eo",
        "idempotent",
        "eo run, upsert by order_id: COPY into an unlogged staging table, INSERT ... ON CONFLICT",
        mode="upsert",
    ),
    Variant(
        "accumulate",
        "eo",
        "exactly-once",
        "exactly-once's ledger plus per-merchant daily totals (mode accumulate, the sink's own "
        "GROUP BY) under the same decision",
        totals=True,
    ),
    Variant(
        "sum-columns",
        "eo",
        "exactly-once",
        "exactly-once with sumColumns [amount_cents]: each batch's sum computed in Spark and "
        "stored with its decision (what the audit checks the table's money against)",
        sums=True,
    ),
    Variant(
        "spark-jdbc",
        "jdbc",
        "at-least-once",
        "plain Structured Streaming, foreachBatch -> df.write.jdbc(mode='append')",
    ),
    Variant(
        "exactly-once-mysql",
        "eo",
        "exactly-once",
        "eo run into MariaDB, fenced 2PC: each writer task's rows in one XA branch (multi-row "
        "INSERTs, XA PREPARE), the decision in the PostgreSQL control database, then XA COMMIT",
        database="mysql",
        label="exactly-once (mysql)",
    ),
    Variant(
        "spark-jdbc-mysql",
        "jdbc",
        "at-least-once",
        "plain Structured Streaming into MariaDB, foreachBatch -> df.write.jdbc(mode='append') "
        "through Connector/J's bulk inserts",
        database="mysql",
        label="spark-jdbc (mysql)",
    ),
    Variant(
        "spark-noop",
        "noop",
        "none",
        "plain Structured Streaming, foreachBatch -> df.write.format('noop'): the engine's ceiling",
    ),
    Variant(
        "copy",
        "copy",
        "none",
        "no Spark: COPY ... FROM STDIN (FORMAT csv) of the same rows, per batch, psycopg",
    ),
)
BY_NAME = {v.name: v for v in VARIANTS}


@dataclass(frozen=True)
class Shape:
    """What every variant is given: the input and the Spark/writer sizing."""

    source: Path
    files_per_trigger: int
    partitions: int
    cores: int
    memory: str
    kafka: KafkaTopic | None = None
    """Read this topic instead of the files (``--source kafka``)."""
    schema: str = SCHEMA_DDL
    """The events' declared schema (the latency bench's carry their send time too)."""
    trigger_seconds: int = 0
    """``triggerIntervalSeconds``: 0 starts a batch as soon as the last one ended."""
    table: str | None = None
    """The sink table instead of the variant's own."""
    mysql_table: str | None = None
    """``database.table`` of the MySQL variants' sink (``bench.mysql_sink.SinkTable.name``)."""


def _source(shape: Shape) -> dict[str, object]:
    """The pipeline's ``spec.source``: the files, or the size's Kafka topic."""
    if shape.kafka is not None:
        return {
            "kafka": {
                "bootstrapServers": shape.kafka.bootstrap_servers,
                "topics": [shape.kafka.topic],
                "startingOffsets": "earliest",
                "maxOffsetsPerTrigger": shape.kafka.max_offsets_per_trigger,
                "format": "json",
                "schema": shape.schema,
            }
        }
    return {
        "files": {
            "path": str(shape.source),
            "format": "json",
            "schema": shape.schema,
            "maxFilesPerTrigger": shape.files_per_trigger,
        }
    }


def pipeline_file(folder: Path, variant: Variant, shape: Shape) -> Path:
    """The pipeline file of one run (its own checkpoint folder inside ``folder``)."""
    sink: dict[str, object] = {"name": "orders", **_first_sink(variant, shape)}
    control = {"control": {"dsn": {"env": DSN_ENV}}} if variant.database == "mysql" else {}
    document = {
        "apiVersion": "eo.dev/v1alpha1",
        "kind": "ExactlyOncePipeline",
        "metadata": {"name": "bench-orders", "namespace": "bench"},
        "spec": {
            # The baselines borrow only source, sink table and Spark settings from this file.
            "guarantee": variant.guarantee if variant.kind == "eo" else "at-least-once",
            "source": _source(shape),
            **control,
            "sinks": [sink, *_totals_sinks(variant, shape)],
            "checkpoint": {
                "location": str(folder / "checkpoint"),
                "triggerIntervalSeconds": shape.trigger_seconds,
            },
            "driver": {"cores": shape.cores, "memory": shape.memory},
        },
    }
    path = folder / "pipeline.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _first_sink(variant: Variant, shape: Shape) -> dict[str, object]:
    """The orders sink: ``postgres`` into the run's database, or ``mysql`` into MariaDB's
    ``shape.mysql_table`` (the baselines read its table and writerPartitions too)."""
    if variant.database == "mysql":
        if shape.mysql_table is None:
            raise ValueError(f"variant {variant.name}: Shape.mysql_table is not set")
        return {
            "mysql": {
                "dsn": {"env": MYSQL_DSN_ENV},
                "table": shape.mysql_table,
                "writerPartitions": shape.partitions,
            }
        }
    postgres: dict[str, object] = {
        "dsn": {"env": DSN_ENV},
        "table": shape.table or variant.table,
        "writerPartitions": shape.partitions,
    }
    if variant.mode == "upsert":
        postgres.update({"mode": "upsert", "keyColumns": ["order_id"]})
    if variant.sums:
        postgres["sumColumns"] = ["amount_cents"]
    return {"postgres": postgres}


def _totals_sinks(variant: Variant, shape: Shape) -> list[dict[str, object]]:
    """The accumulate variant's totals sink (none for the others)."""
    if not variant.totals:
        return []
    return [
        {
            "name": "daily",
            "transform": {"sql": TOTALS_SQL},
            "postgres": {
                "dsn": {"env": DSN_ENV},
                "table": TOTALS_TABLE,
                "mode": "accumulate",
                "keyColumns": ["merchant", "day"],
                "addColumns": ["volume_cents", "payments"],
                "writerPartitions": shape.partitions,
            },
        }
    ]


def _pinned(key: str) -> str:
    """A version pinned in tools/jars/versions.properties."""
    for line in VERSIONS.read_text().splitlines():
        name, _, value = line.partition("=")
        if name.strip() == key:
            return value.strip()
    raise RuntimeError(f"{key} is missing from {VERSIONS}")


def pgjdbc_version() -> str:
    """The pinned PostgreSQL JDBC driver version (tools/jars/versions.properties)."""
    return _pinned("postgresql.jdbc.version")


def mariadb_jdbc_version() -> str:
    """The pinned MariaDB Connector/J version (tools/jars/versions.properties)."""
    return _pinned("mariadb.jdbc.version")


def _cached_jars(folder: str, what: str) -> list[Path]:
    """The jars of ``folder`` in the cache; says how to fetch them when they are not there."""
    path = eo_cache() / "jars" / folder
    jars = sorted(path.glob("*.jar"))
    if not (path / COMPLETE_STAMP).is_file() or not jars:
        raise RuntimeError(
            f"{what} is not in {path}: run scripts/fetch-jars.sh (or ./dev setup) first"
        )
    return jars


def pgjdbc_jars() -> list[Path]:
    """The PostgreSQL JDBC driver's jars in the cache."""
    return _cached_jars(f"postgresql-jdbc-{pgjdbc_version()}", "the PostgreSQL JDBC driver")


def mariadb_jdbc_jars() -> list[Path]:
    """MariaDB Connector/J's jars in the cache (the MySQL JDBC baseline's driver)."""
    return _cached_jars(f"mariadb-jdbc-{mariadb_jdbc_version()}", "MariaDB Connector/J")


def command(
    variant: Variant, spec: Path, jdbc_url: str, *, epoch: int = 1, available_now: bool = True
) -> list[str]:
    """The driver's command line (Spark variants only)."""
    if variant.kind == "jdbc":
        mysql = variant.database == "mysql"
        jars = ",".join(str(j) for j in (mariadb_jdbc_jars() if mysql else pgjdbc_jars()))
        args = [sys.executable, "-m", "bench.spark_jdbc_job", str(spec), "--url", jdbc_url]
        if mysql:
            args += ["--user", "root", "--driver", "org.mariadb.jdbc.Driver"]
            args += ["--batch-size", str(JDBC_BATCH_SIZE)]
        return [*args, "--jars", jars]
    if variant.kind == "noop":
        return [sys.executable, "-m", "bench.spark_noop_job", str(spec)]
    if variant.kind != "eo":
        raise ValueError(f"{variant.name} runs no driver")
    args = [sys.executable, "-m", "eo_jobs.cli", "run", str(spec), "--epoch", str(epoch)]
    if available_now:
        args.append("--available-now")
    return [*args, "--metrics-port", "0"]


def environment(dsn: str, mysql_dsn: str | None = None) -> dict[str, str]:
    """The driver's environment: ours, minus fault injection, plus the DSNs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EO_FAULT")}
    env[DSN_ENV] = dsn
    if mysql_dsn is not None:
        env[MYSQL_DSN_ENV] = mysql_dsn
    return env
