"""A local checkpoint is written by the checkpoint manager eo names, and a query resumes from it.

For a checkpoint in a local folder eo sets ``spark.sql.streaming.checkpointFileManagerClass``
(``runtime.session.write_path_defaults``). The class is Spark's own and its package moved in
Spark 4.1: a name the installed Spark does not have fails every query at start, and one Spark
ignored would bring back a ``readlink`` process per path component on every log write. So this
runs a real query with the setting eo derives, stops it, and starts it again from its checkpoint.
eo also sends ``file:`` paths through Hadoop's raw local file system (no ``.crc`` files, so
half the ``chmod`` processes per log write); the query runs on that too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.pipelines import document

from eo_jobs.runtime.session import (
    CHECKPOINT_MANAGER_KEY,
    LOCAL_CHECKPOINT_MANAGER,
    LOCAL_FILE_SYSTEM_KEY,
    RAW_LOCAL_FILE_SYSTEM,
    spark_conf,
)
from eo_jobs.spec import parse_pipeline


def _eo_settings() -> dict[str, str]:
    spec = parse_pipeline(document(checkpoint={"location": "/data/checkpoints/orders"})).spec
    conf = spark_conf(spec, "app", environ={})
    return {key: conf[key] for key in (CHECKPOINT_MANAGER_KEY, LOCAL_FILE_SYSTEM_KEY)}


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    from tests.support.spark import local_session

    conf = _eo_settings()
    with local_session("eo-checkpoint-manager-test", conf) as session:
        yield session


def _run(spark: Any, tmp_path: Path) -> None:
    """Every file of ``tmp_path/in`` not yet in the checkpoint, one per batch, into ``out``."""
    query = (
        spark.readStream.schema("id INT")
        .option("maxFilesPerTrigger", 1)
        .json(str(tmp_path / "in"))
        .writeStream.format("json")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None


def _add(folder: Path, name: str, ids: range) -> None:
    folder.mkdir(exist_ok=True)
    (folder / name).write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))


def test_spark_writes_a_local_checkpoint_with_the_file_system_manager(
    spark: Any, tmp_path: Path
) -> None:
    jvm = spark._jvm
    path = jvm.org.apache.hadoop.fs.Path(str(tmp_path / "ckpt"))
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    manager = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager
    assert manager.create(path, conf).getClass().getName() == LOCAL_CHECKPOINT_MANAGER


def test_local_paths_go_through_hadoops_raw_local_file_system(spark: Any) -> None:
    jvm = spark._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    uri = jvm.java.net.URI("file:///")
    assert jvm.org.apache.hadoop.fs.FileSystem.get(uri, conf).getClass().getName() == (
        RAW_LOCAL_FILE_SYSTEM
    )


def test_a_query_stopped_and_started_again_resumes_from_that_checkpoint(
    spark: Any, tmp_path: Path
) -> None:
    _add(tmp_path / "in", "a.json", range(0, 3))
    _add(tmp_path / "in", "b.json", range(3, 6))
    _run(spark, tmp_path)
    _add(tmp_path / "in", "c.json", range(6, 9))
    _run(spark, tmp_path)

    ids = sorted(r.id for r in spark.read.schema("id INT").json(str(tmp_path / "out")).collect())
    assert ids == list(range(9))
    # The raw file system writes no checksum files (nor runs a chmod process for each).
    assert [p.name for p in (tmp_path / "ckpt").rglob("*.crc")] == []
    assert sorted(
        p.name for p in (tmp_path / "ckpt" / "commits").iterdir() if p.name.isdigit()
    ) == [
        "0",
        "1",
        "2",
    ]
