"""The folder operations lifecycle actions use behave the same on this machine's file system
(``LocalStore``) and through Spark's Hadoop FileSystem (``HadoopStore``, what an s3a:// or
hdfs:// checkpoint goes through; here on file:// URIs)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession
from tests.support.spark import local_session

from eo_jobs.runtime.checkpoint_store import HadoopStore, LocalStore, Store, store_for


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with local_session("eo-checkpoint-store-test") as session:
        yield session


@pytest.fixture(params=["local", "hadoop"])
def store(request: pytest.FixtureRequest, spark: SparkSession) -> Store:
    return LocalStore() if request.param == "local" else HadoopStore(spark)


def _at(store: Store, path: Path) -> str:
    return str(path) if isinstance(store, LocalStore) else f"file://{path}"


def _names(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if not p.name.endswith(".crc"))


def test_a_folder_is_copied_moved_and_deleted_whole(store: Store, tmp_path: Path) -> None:
    (tmp_path / "ckpt" / "offsets").mkdir(parents=True)
    (tmp_path / "ckpt" / "offsets" / "0").write_text("v1\n{}\n")
    (tmp_path / "ckpt" / "metadata").write_text('{"id":"q"}\n')
    ckpt = _at(store, tmp_path / "ckpt")
    assert [n for n in store.names(ckpt) if not n.endswith(".crc")] == ["metadata", "offsets"]
    assert store.names(_at(store, tmp_path / "none")) == []
    store.copy(f"{ckpt}/offsets", f"{ckpt}/eo-snapshots/a/offsets")
    store.copy(f"{ckpt}/metadata", f"{ckpt}/eo-snapshots/a/metadata")
    copy = tmp_path / "ckpt" / "eo-snapshots" / "a"
    assert (copy / "offsets" / "0").read_text() == "v1\n{}\n"
    assert (copy / "metadata").read_text() == '{"id":"q"}\n'
    store.move(f"{ckpt}/offsets", f"{ckpt}/eo-snapshots/b/offsets")
    assert not (tmp_path / "ckpt" / "offsets").exists()
    assert _names(tmp_path / "ckpt" / "eo-snapshots" / "b" / "offsets") == ["0"]
    store.delete(f"{ckpt}/eo-snapshots/a")
    store.delete(f"{ckpt}/eo-snapshots/never")
    assert not copy.exists() and store.exists(f"{ckpt}/eo-snapshots/b")


def test_a_file_is_written_replaced_and_read_back(store: Store, tmp_path: Path) -> None:
    target = _at(store, tmp_path / "s" / "eo-snapshot.json")
    assert store.read(target) is None
    store.write(target, '{"queryId": "q"}\n')
    store.write(target, '{"queryId": "r"}\n')
    assert store.read(target) == '{"queryId": "r"}\n'
    assert (tmp_path / "s" / "eo-snapshot.json").read_text() == '{"queryId": "r"}\n'


def test_a_files_modification_time_is_the_one_spark_logs_in_ms(
    store: Store, tmp_path: Path
) -> None:
    data = tmp_path / "part-0.json"
    assert store.modified(_at(store, data)) is None
    data.write_text("{}\n")
    os.utime(data, ns=(0, 1_700_000_000_123_456_789))
    assert store.modified(_at(store, data)) == 1_700_000_000_123


def test_spark_file_source_paths_name_local_files(tmp_path: Path) -> None:
    data = tmp_path / "in dir" / "part-0.json"
    data.parent.mkdir()
    data.write_text("{}\n")
    for uri in (f"file://{data}", f"file:{data}", "file:" + str(data).replace(" ", "%20")):
        assert store_for(uri, None).exists(uri), uri
    assert isinstance(store_for(str(tmp_path), None), LocalStore)
    with pytest.raises(RuntimeError, match="Hadoop"):
        store_for("s3a://bucket/ckpt", None)
