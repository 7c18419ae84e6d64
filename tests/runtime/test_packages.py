"""The Kafka connector's jars are found by PySpark version, or reported missing with the fix."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest

from eo_jobs.runtime import packages
from eo_jobs.runtime.packages import (
    HADOOP_AWS_JARS_ENV,
    JARS_OVERRIDE_ENV,
    WRITER_JARS_ENV,
    WRITER_SOURCES,
    MissingPackageError,
    hadoop_aws_jars,
    installed_hadoop_version,
    kafka_connector_jars,
    writer_folder,
    writer_jars,
)

SPARK = importlib.metadata.version("pyspark")
CONNECTOR = f"spark-sql-kafka-0-10_2.13-{SPARK}.jar"


def _jar_folder(folder: Path, names: list[str], complete: bool = True) -> Path:
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).touch()
    if complete:
        (folder / ".complete").touch()
    return folder


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EO_CACHE", str(tmp_path))
    monkeypatch.delenv(JARS_OVERRIDE_ENV, raising=False)
    return tmp_path


def test_missing_connector_names_the_maven_package_and_the_setup_command(cache: Path) -> None:
    with pytest.raises(MissingPackageError) as error:
        kafka_connector_jars()

    message = str(error.value)
    assert f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK}" in message
    assert "./dev setup" in message
    assert "scripts/fetch-jars.sh" in message


def test_fetched_connector_jars_are_listed_for_the_installed_pyspark(cache: Path) -> None:
    folder = _jar_folder(
        cache / "jars" / f"spark-kafka-{SPARK}",
        [CONNECTOR, "kafka-clients-3.9.1.jar", "commons-pool2-2.12.1.jar"],
    )

    jars = kafka_connector_jars()

    assert folder / CONNECTOR in jars
    assert sorted(jar.name for jar in jars) == sorted(
        [CONNECTOR, "kafka-clients-3.9.1.jar", "commons-pool2-2.12.1.jar"]
    )
    assert all(jar.is_absolute() for jar in jars)


def test_a_half_fetched_folder_without_its_stamp_counts_as_missing(cache: Path) -> None:
    _jar_folder(cache / "jars" / f"spark-kafka-{SPARK}", [CONNECTOR], complete=False)

    with pytest.raises(MissingPackageError, match=re.escape("scripts/fetch-jars.sh")):
        kafka_connector_jars()


def test_a_connector_built_for_another_spark_version_counts_as_missing(cache: Path) -> None:
    _jar_folder(cache / "jars" / "spark-kafka-3.5.0", ["spark-sql-kafka-0-10_2.13-3.5.0.jar"])
    _jar_folder(cache / "jars" / f"spark-kafka-{SPARK}", ["spark-sql-kafka-0-10_2.13-3.5.0.jar"])

    with pytest.raises(MissingPackageError, match=re.escape(f"spark-sql-kafka-0-10_2.13:{SPARK}")):
        kafka_connector_jars()


def test_the_override_folder_is_used_instead_of_the_cache(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    baked = _jar_folder(tmp_path / "image-jars", [CONNECTOR], complete=False)
    monkeypatch.setenv(JARS_OVERRIDE_ENV, str(baked))

    assert kafka_connector_jars() == [baked / CONNECTOR]


def test_an_override_folder_without_the_connector_names_the_variable(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(JARS_OVERRIDE_ENV, str(tmp_path / "empty"))

    with pytest.raises(MissingPackageError, match=re.escape(JARS_OVERRIDE_ENV)):
        kafka_connector_jars()


def test_missing_s3a_jars_name_the_hadoop_version_pyspark_ships_and_the_fix(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(HADOOP_AWS_JARS_ENV, raising=False)
    version = installed_hadoop_version()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)

    with pytest.raises(MissingPackageError) as error:
        hadoop_aws_jars()

    assert f"org.apache.hadoop:hadoop-aws:{version}" in str(error.value)
    assert "scripts/fetch-jars.sh" in str(error.value)
    _jar_folder(cache / "jars" / f"hadoop-aws-{version}", [f"hadoop-aws-{version}.jar"])
    assert [jar.name for jar in hadoop_aws_jars()] == [f"hadoop-aws-{version}.jar"]


def test_the_jvm_writer_is_rebuilt_into_a_new_folder_when_its_source_or_pom_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EO_CACHE", str(tmp_path / "cache"))
    module = tmp_path / "writer"
    sources = module / "src" / "main" / "java"
    for path in WRITER_SOURCES.rglob("*.java"):
        copy = sources / path.relative_to(WRITER_SOURCES)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(path.read_bytes())
    pom = WRITER_SOURCES.parents[2] / "pom.xml"
    (module / "pom.xml").write_bytes(pom.read_bytes())
    monkeypatch.setattr(packages, "WRITER_SOURCES", sources)
    before = writer_folder()
    assert before.parent == tmp_path / "cache" / "jars" and before.name.startswith("eo-writer-")
    # The module's tests change no byte of the jar.
    test = module / "src" / "test" / "java" / "dev" / "eo" / "writer" / "KindTest.java"
    test.parent.mkdir(parents=True)
    test.write_text("// a test\n", encoding="utf-8")
    assert writer_folder() == before

    (module / "pom.xml").write_bytes(pom.read_bytes() + b"<!-- changed -->\n")
    after_pom = writer_folder()
    assert after_pom != before
    next(sources.rglob("Kind.java")).write_text("// changed\n", encoding="utf-8")

    assert writer_folder() not in {before, after_pom}
    assert (
        writer_jars() == "the JVM writer is not built (run scripts/build-writer.sh or ./dev setup)"
    )


def test_a_writer_folder_named_by_the_environment_must_hold_the_jar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WRITER_JARS_ENV, str(_jar_folder(tmp_path / "w", ["postgresql.jar"])))
    assert writer_jars() == f"no eo-writer.jar in {tmp_path / 'w'}"

    (tmp_path / "w" / "eo-writer.jar").touch()
    assert writer_jars() == [tmp_path / "w" / "eo-writer.jar", tmp_path / "w" / "postgresql.jar"]
