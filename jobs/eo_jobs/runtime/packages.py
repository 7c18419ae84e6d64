"""Where the jars of Spark's Kafka connector are on this machine.

PySpark ships no Kafka connector, and `spark.jars.packages` would resolve it from the network
at every start. `scripts/fetch-jars.sh` resolves it once, from Maven Central, into a cache
folder keyed by the PySpark version; this module finds that folder. It never imports pyspark,
so the CLI can report a missing connector (and how to fetch it) before it starts a JVM.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

CONNECTOR_GROUP = "org.apache.spark"
CONNECTOR_ARTIFACT = "spark-sql-kafka-0-10_2.13"
JARS_OVERRIDE_ENV = "EO_SPARK_KAFKA_JARS"
"""Names a folder of jars to use instead of the cache (an image that bakes them in)."""
COMPLETE_STAMP = ".complete"
"""Written by fetch-jars.sh last, so a half-copied cache folder is never used."""


class MissingPackageError(RuntimeError):
    """A package the Spark runtime needs is not installed; the message says how to fix it."""


def connector_coordinates(spark_version: str) -> str:
    """The Maven coordinates of the connector that matches `spark_version`."""
    return f"{CONNECTOR_GROUP}:{CONNECTOR_ARTIFACT}:{spark_version}"


def eo_cache() -> Path:
    """The tool cache shared by the setup scripts (`$EO_CACHE`, default `~/.cache/eo`)."""
    configured = os.environ.get("EO_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "eo"


def installed_pyspark_version() -> str:
    """The installed PySpark version, read from package metadata (no JVM, no import)."""
    try:
        return importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        raise MissingPackageError(
            "pyspark is not installed in this Python environment; "
            "install eo with its Spark extra (`pip install 'eo[spark]'`) or run `./dev setup`"
        ) from None


def kafka_connector_jars(spark_version: str | None = None) -> list[Path]:
    """The connector jar and its dependencies for `spark_version` (default: installed PySpark).

    The connector must match Spark exactly (it links against Spark internals), so a folder
    holding another version's connector counts as missing.
    """
    version = spark_version or installed_pyspark_version()
    override = os.environ.get(JARS_OVERRIDE_ENV)
    folder = Path(override) if override else eo_cache() / "jars" / f"spark-kafka-{version}"
    jars = sorted(folder.glob("*.jar"))
    connector = f"{CONNECTOR_ARTIFACT}-{version}.jar"
    complete = bool(override) or (folder / COMPLETE_STAMP).is_file()
    if not complete or connector not in {jar.name for jar in jars}:
        source = f"${JARS_OVERRIDE_ENV}" if override else "the jar cache"
        raise MissingPackageError(
            f"Spark's Kafka connector {connector_coordinates(version)} is not in {folder} "
            f"({source}: expected {connector}). Fetch it with `./dev setup` "
            f"or `scripts/fetch-jars.sh`"
            + (f", or point ${JARS_OVERRIDE_ENV} at a folder that holds it." if override else ".")
        )
    return jars
