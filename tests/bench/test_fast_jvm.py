"""The class archive test drivers start from: Spark's classes really come from it, a missing one
only costs speed, and archives of other checkouts are kept until a week unused."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from tests.support.spark import local_session

from bench import fast_jvm


@pytest.mark.spark
def test_a_test_driver_loads_spark_s_classes_from_the_archive(tmp_path: Path) -> None:
    assert fast_jvm.archive().is_file(), "set-up builds it: run ./dev setup"
    log = tmp_path / "classes.log"
    options = f"{fast_jvm.java_options()} -Xlog:class+load=info:file={log}"
    with local_session("eo-class-archive", {"spark.driver.extraJavaOptions": options}) as spark:
        assert spark.range(3).count() == 3
    loaded = log.read_text()
    # "(top)": the dynamic archive built for Spark, not the JDK's own base archive.
    assert re.search(
        r"org\.apache\.spark\.SparkContext source: shared objects file \(top\)", loaded
    )


def test_without_an_archive_the_options_are_the_fast_ones_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EO_CACHE", str(tmp_path))
    assert fast_jvm.java_options() == fast_jvm.BASE


def test_only_archives_unused_for_a_week_are_pruned(tmp_path: Path) -> None:
    fresh, old, half = (tmp_path / n for n in ("spark-a.jsa", "spark-b.jsa", "spark-c.1.partial"))
    for path in (fresh, old, half):
        path.write_bytes(b"x")
    week_ago = time.time() - fast_jvm.STALE_SECONDS - 60
    os.utime(old, (week_ago, week_ago))
    os.utime(half, (week_ago, week_ago))

    fast_jvm._prune(tmp_path)

    assert sorted(p.name for p in tmp_path.iterdir()) == ["spark-a.jsa"]
