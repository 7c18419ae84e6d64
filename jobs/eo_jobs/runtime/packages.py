"""Where the jars PySpark does not ship are on this machine: Spark's Kafka connector, Hadoop's
S3A file system (for ``s3a://`` checkpoints), eo's JVM writer with the PostgreSQL JDBC driver.

`spark.jars.packages` would resolve them from the network at every start.
`scripts/fetch-jars.sh` resolves them once, from Maven Central, into cache folders keyed by the
PySpark (or its Hadoop client's) version; this module finds those folders. It never imports pyspark,
so the CLI can report a missing connector (and how to fetch it) before it starts a JVM.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
from pathlib import Path

CONNECTOR_GROUP = "org.apache.spark"
CONNECTOR_ARTIFACT = "spark-sql-kafka-0-10_2.13"
JARS_OVERRIDE_ENV = "EO_SPARK_KAFKA_JARS"
"""Names a folder of jars to use instead of the cache (an image that bakes them in)."""
HADOOP_AWS_JARS_ENV = "EO_HADOOP_AWS_JARS"
"""Names a folder of S3A jars to use instead of the cache (an image that bakes them in)."""
WRITER_JARS_ENV = "EO_WRITER_JARS"
"""Names the folder of eo's JVM writer jar (and pgJDBC) instead of the cache (the job image)."""
WRITER_JAR = "eo-writer.jar"
_REPO = Path(__file__).resolve().parents[3]
WRITER_SOURCES = _REPO / "jvm" / "writer" / "src" / "main" / "java"
"""The main sources of the writer's Maven module (jvm/writer, whose pom.xml is three levels up)."""
JAR_VERSIONS = _REPO / "tools" / "jars" / "versions.properties"
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
    return _cached_jars(
        f"spark-kafka-{version}",
        f"{CONNECTOR_ARTIFACT}-{version}.jar",
        JARS_OVERRIDE_ENV,
        f"Spark's Kafka connector {connector_coordinates(version)}",
    )


def _cached_jars(folder_name: str, wanted: str, override_env: str, what: str) -> list[Path]:
    """The jars of a fetch-jars.sh cache folder (or of the folder ``override_env`` names),
    refused unless the folder is complete and holds ``wanted``."""
    override = os.environ.get(override_env)
    folder = Path(override) if override else eo_cache() / "jars" / folder_name
    jars = sorted(folder.glob("*.jar"))
    complete = bool(override) or (folder / COMPLETE_STAMP).is_file()
    if not complete or wanted not in {jar.name for jar in jars}:
        source = f"${override_env}" if override else "the jar cache"
        raise MissingPackageError(
            f"{what} is not in {folder} ({source}: expected {wanted}). Fetch it with "
            "`./dev setup` or `scripts/fetch-jars.sh`"
            + (f", or point ${override_env} at a folder that holds it." if override else ".")
        )
    return jars


def installed_hadoop_version() -> str:
    """The version of the Hadoop client PySpark ships (its ``hadoop-client-api`` jar)."""
    installed_pyspark_version()
    for file in importlib.metadata.files("pyspark") or []:
        match = re.fullmatch(r"hadoop-client-api-(.+)\.jar", file.name)
        if match:
            return match.group(1)
    raise MissingPackageError("the installed pyspark ships no hadoop-client-api jar")


def hadoop_aws_jars(hadoop_version: str | None = None) -> list[Path]:
    """Hadoop's S3A file system and the AWS SDK modules it calls, for ``s3a://`` locations.

    S3A links against the Hadoop client, so it must be the very version PySpark ships.
    """
    version = hadoop_version or installed_hadoop_version()
    return _cached_jars(
        f"hadoop-aws-{version}",
        f"hadoop-aws-{version}.jar",
        HADOOP_AWS_JARS_ENV,
        f"Hadoop's S3A file system org.apache.hadoop:hadoop-aws:{version} "
        "(for an s3a:// checkpoint location)",
    )


def writer_folder() -> Path:
    """The cache folder ``scripts/build-writer.sh`` builds the JVM writer into.

    Keyed by the writer's sources and its pom, the pinned jar versions and the installed
    PySpark (the writer links against Spark's internal rows), so a change to any of them builds
    anew. Its tests (src/test) are not in the key: they change no byte of the jar.
    """
    digest = hashlib.sha256()
    module = WRITER_SOURCES.parents[2]
    for path in [module / "pom.xml", *sorted(WRITER_SOURCES.rglob("*.java"))]:
        digest.update(path.relative_to(module).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    digest.update(JAR_VERSIONS.read_bytes() + b"\0")
    digest.update(installed_pyspark_version().encode())
    return eo_cache() / "jars" / f"eo-writer-{digest.hexdigest()[:16]}"


def writer_jars() -> list[Path] | str:
    """eo's JVM writer jar and the JDBC driver it uses, or why they cannot be used here."""
    override = os.environ.get(WRITER_JARS_ENV)
    if override:
        folder = Path(override)
    elif not WRITER_SOURCES.is_dir():
        return f"the JVM writer is not installed (set ${WRITER_JARS_ENV} to its folder)"
    else:
        folder = writer_folder()
        if not (folder / COMPLETE_STAMP).is_file():
            return "the JVM writer is not built (run scripts/build-writer.sh or ./dev setup)"
    jars = sorted(folder.glob("*.jar"))
    if WRITER_JAR not in {jar.name for jar in jars}:
        return f"no {WRITER_JAR} in {folder}"
    return jars
