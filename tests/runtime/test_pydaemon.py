"""eo's PySpark daemon keeps Spark's archives off the workers' path when they only shadow."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from eo_jobs.runtime.pydaemon import without_shadowed_archives
from eo_jobs.runtime.session import write_path_defaults
from eo_jobs.spec import parse_pipeline

REPO = Path(__file__).resolve().parents[2]


def _packages(folder: Path, *names: str) -> str:
    for name in names:
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text("")
    return str(folder)


def test_spark_archives_are_dropped_when_the_installed_packages_provide_them(
    tmp_path: Path,
) -> None:
    site = _packages(tmp_path / "site", "pyspark", "py4j")
    path = [
        "/spark/python/lib/pyspark.zip",
        "/spark/python/lib/py4j-0.10.9.9-src.zip",
        "/spark/jars/spark-core_2.13-4.1.1.jar",
        "/app/deps.zip",
        site,
    ]

    assert without_shadowed_archives(path) == ["/app/deps.zip", site]


def test_nothing_is_dropped_where_the_archives_are_the_only_pyspark(tmp_path: Path) -> None:
    site = _packages(tmp_path / "site", "py4j")
    path = ["/spark/python/lib/pyspark.zip", "/spark/jars/spark-core_2.13-4.1.1.jar", site]

    assert without_shadowed_archives(path) == path


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """A session with eo's write-path defaults (its daemon among them)."""
    pytest.importorskip("pyspark")
    from tests.support.spark import own_jvm_session

    doc = yaml.safe_load((REPO / "examples" / "orders-ledger.yaml").read_text())
    conf = {"spark.ui.enabled": "false", **write_path_defaults(parse_pipeline(doc).spec)}
    assert conf["spark.python.daemon.module"] == "eo_jobs.runtime.pydaemon"
    with own_jvm_session("eo-pydaemon-test", "local[1]", conf) as session:
        yield session


def test_writer_tasks_run_in_workers_without_archives_on_their_path(spark: Any) -> None:
    import pyarrow as pa  # type: ignore[import-untyped]

    def probe(batches: Iterator[Any]) -> Iterator[Any]:
        import sys
        import zipimport

        for _ in batches:
            pass
        archives = [
            key
            for key, finder in sys.path_importer_cache.items()
            if isinstance(finder, zipimport.zipimporter)
        ]
        jars = [entry for entry in sys.path if entry.endswith(".jar")]
        yield pa.RecordBatch.from_pydict({"archives": [repr(archives + jars)]})

    row = spark.range(0, 10, 1, 1).mapInArrow(probe, "archives string").collect()[0]
    assert row.archives == "[]"
