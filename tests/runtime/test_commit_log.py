"""The latest batch of Spark's commit log, found by listing it (Spark purges old commit files)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession
from tests.support.spark import local_session

from eo_jobs.runtime.commit_log import _hadoop_names, latest_commit


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with local_session("eo-commit-log-test") as session:
        yield session


def _purged_log(checkpoint: Path) -> None:
    """Commit files 117..119 only (earlier ones purged), with the checksums Hadoop writes."""
    commits = checkpoint / "commits"
    commits.mkdir(parents=True)
    for batch in (117, 118, 119):
        (commits / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
        (commits / f".{batch}.crc").write_bytes(b"crc")


def test_the_latest_commit_is_the_highest_listed_batch_locally_and_through_hadoop(
    tmp_path: Path, spark: SparkSession
) -> None:
    _purged_log(tmp_path)
    assert latest_commit(str(tmp_path), spark) == 119
    # Any other URI is listed through the session's Hadoop FileSystem (s3a://, gs://, ...).
    names = _hadoop_names(f"file://{tmp_path}/commits", spark)
    assert sorted(n for n in names if n.isdigit()) == ["117", "118", "119"]


def test_a_checkpoint_without_commits_has_no_latest_commit(
    tmp_path: Path, spark: SparkSession
) -> None:
    assert latest_commit(str(tmp_path / "new"), spark) is None
    assert _hadoop_names(f"file://{tmp_path}/new/commits", spark) == []
