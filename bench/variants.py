"""The four ways the bench writes the same events, and how each one is started.

Every variant reads the same files with the same schema, the same ``maxFilesPerTrigger`` and
the same Spark configuration (taken from one pipeline file), and writes through as many
concurrent writer tasks; only the write path differs.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.data import SCHEMA_DDL
from eo_jobs.runtime.packages import COMPLETE_STAMP, eo_cache

REPO = Path(__file__).resolve().parents[1]
DSN_ENV = "BENCH_DSN"
TABLE = "public.orders"
VERSIONS = REPO / "tools" / "jars" / "versions.properties"


@dataclass(frozen=True)
class Variant:
    """One write path under test."""

    name: str
    guarantee: str
    """``spec.guarantee`` of its pipeline file."""
    eo: bool
    """Whether it runs ``eo run`` (False: the plain Spark job)."""
    meaning: str

    @property
    def two_phase(self) -> bool:
        """Whether the variant promises exactly-once (its audit must be exact)."""
        return self.guarantee == "exactly-once"


VARIANTS = (
    Variant(
        "exactly-once",
        "exactly-once",
        True,
        "eo run, fenced 2PC: Arrow batches -> CSV COPY + PREPARE per task, one decision per batch",
    ),
    Variant(
        "at-least-once",
        "at-least-once",
        True,
        "eo run, each writer task COPYs and commits on its own",
    ),
    Variant(
        "spark-jdbc",
        "at-least-once",
        False,
        "plain Structured Streaming, foreachBatch -> df.write.jdbc(mode='append')",
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


def pipeline_file(folder: Path, variant: Variant, shape: Shape) -> Path:
    """The pipeline file of one run (its own checkpoint folder inside ``folder``)."""
    document = {
        "apiVersion": "eo.dev/v1alpha1",
        "kind": "ExactlyOncePipeline",
        "metadata": {"name": "bench-orders", "namespace": "bench"},
        "spec": {
            "guarantee": variant.guarantee,
            "source": {
                "files": {
                    "path": str(shape.source),
                    "format": "json",
                    "schema": SCHEMA_DDL,
                    "maxFilesPerTrigger": shape.files_per_trigger,
                }
            },
            "sinks": [
                {
                    "name": "orders",
                    "postgres": {
                        "dsn": {"env": DSN_ENV},
                        "table": TABLE,
                        "writerPartitions": shape.partitions,
                    },
                }
            ],
            "checkpoint": {"location": str(folder / "checkpoint"), "triggerIntervalSeconds": 0},
            "driver": {"cores": shape.cores, "memory": shape.memory},
        },
    }
    path = folder / "pipeline.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def pgjdbc_version() -> str:
    """The pinned PostgreSQL JDBC driver version (tools/jars/versions.properties)."""
    for line in VERSIONS.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "postgresql.jdbc.version":
            return value.strip()
    raise RuntimeError(f"postgresql.jdbc.version is missing from {VERSIONS}")


def pgjdbc_jars() -> list[Path]:
    """The JDBC driver's jars in the cache; says how to fetch them when they are not there."""
    folder = eo_cache() / "jars" / f"postgresql-jdbc-{pgjdbc_version()}"
    jars = sorted(folder.glob("*.jar"))
    if not (folder / COMPLETE_STAMP).is_file() or not jars:
        raise RuntimeError(
            f"the PostgreSQL JDBC driver is not in {folder}: run scripts/fetch-jars.sh "
            "(or ./dev setup) first"
        )
    return jars


def command(variant: Variant, spec: Path, jdbc_url: str) -> list[str]:
    """The driver's command line."""
    if not variant.eo:
        jars = ",".join(str(j) for j in pgjdbc_jars())
        return [
            sys.executable,
            "-m",
            "bench.spark_jdbc_job",
            str(spec),
            "--url",
            jdbc_url,
            "--jars",
            jars,
        ]
    return [
        sys.executable,
        "-m",
        "eo_jobs.cli",
        "run",
        str(spec),
        "--epoch",
        "1",
        "--available-now",
        "--metrics-port",
        "0",
    ]


def environment(variant: Variant, dsn: str) -> dict[str, str]:
    """The driver's environment: ours, minus fault injection, plus the DSN."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EO_FAULT")}
    env[DSN_ENV] = dsn
    return env
