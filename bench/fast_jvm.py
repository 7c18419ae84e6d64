"""JVM options for short-lived Spark drivers (tests, chaos runs), and the class archive they use.

A test driver lives for seconds, so its JVM spends most of its CPU loading and compiling
Spark's classes, and the suite starts hundreds of them on two cores. Three options cut that:
the serial collector and C1 alone (no C2 compiles that a short process never pays back), and
a dynamic class-data-sharing archive of the classes a Spark streaming driver loads (JDK 13+,
``-XX:ArchiveClassesAtExit`` once, ``-XX:SharedArchiveFile`` after): a session on this machine
starts and runs its first queries in about 7 s instead of 12.

The archive belongs to one JDK and one set of Spark jars (the JVM checks their sizes and
times and ignores an archive that does not match), so its name carries a hash of both and
it lives in the tool cache (``EO_CACHE``), one per checkout's virtualenv, pruned after a week
unused. ``python -m bench.fast_jvm`` builds it once; set-up
runs that. Without it the options are the same minus the archive: slower, never wrong.
These options are for tests only: a pipeline's drivers keep eo's throughput collector.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASE = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
"""An archive the JVM cannot map is dropped with a warning on stdout; tests read stdout."""


def _cache() -> Path:
    return Path(os.environ.get("EO_CACHE") or Path.home() / ".cache" / "eo") / "spark-cds"


def _jars() -> Path:
    import pyspark  # where Spark is installed, not wherever this module is imported

    return Path(pyspark.__file__).parent / "jars"


@functools.cache
def _fingerprint() -> str:
    """A hash of the JDK's version and of every Spark jar's name, size and time."""
    version = subprocess.run(
        ["java", "-version"], capture_output=True, text=True, check=True
    ).stderr
    jars = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in _jars().glob("*.jar"))
    blob = json.dumps([version, jars]).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def archive() -> Path:
    """Where this JDK's and these jars' archive is, built or not."""
    return _cache() / f"spark-{_fingerprint()}.jsa"


def java_options() -> str:
    """Options for a test driver: ``BASE``, plus the archive when it has been built."""
    path = archive()
    if not path.is_file():
        return BASE
    return f"{BASE} {QUIET} -XX:SharedArchiveFile={path}"


def build() -> Path:
    """Run a Spark streaming workload once with ``-XX:ArchiveClassesAtExit``; keep the archive.

    The workload touches what eo's drivers touch: a JSON file stream in micro-batches,
    ``foreachBatch``, SQL with aggregates and decimals, Arrow batches to Python workers.
    Written beside the target and renamed, so a half-written archive is never used.
    """
    target = archive()
    if target.is_file():
        os.utime(target)  # in use: see _prune
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.partial")
    options = f"{BASE} -XX:ArchiveClassesAtExit={partial}"
    with tempfile.TemporaryDirectory(prefix="eo-cds-") as work:
        subprocess.run(
            [sys.executable, "-m", "bench.fast_jvm", "--workload", work, options],
            check=True,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=600,
        )
    partial.replace(target)
    _prune(target.parent)
    return target


STALE_SECONDS = 7 * 24 * 3600
"""An archive no set-up has used for a week belongs to a JDK or a Spark no checkout has now."""


def _prune(folder: Path) -> None:
    """Remove archives (and half-written ones) nobody used for ``STALE_SECONDS``.

    Each checkout (a clone in CI, a worktree) has its own virtualenv and so its own jars and
    archive; deleting every other archive would make two checkouts rebuild each other's.
    """
    cutoff = time.time() - STALE_SECONDS
    for path in folder.glob("spark-*"):
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_mtime < cutoff:
                path.unlink()


def _workload(work: Path, options: str) -> None:
    """The classes a streaming driver loads; run in its own process so its JVM exits (and
    writes the archive) when the process does."""
    from pyspark import SparkContext
    from pyspark.sql import DataFrame, SparkSession

    folder = work / "in"
    folder.mkdir()
    for index in range(3):
        rows = (
            json.dumps({"order_id": i, "merchant": f"m{i % 5}", "amount_cents": i * 37})
            for i in range(index * 100, index * 100 + 100)
        )
        (folder / f"part-{index}.json").write_text("\n".join(rows) + "\n")
    session = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.extraJavaOptions", options)
        .getOrCreate()
    )

    def batch(frame: object, batch_id: int) -> None:
        assert isinstance(frame, DataFrame)
        frame.persist()
        frame.selectExpr("merchant", "CAST(amount_cents AS DECIMAL(18,2)) AS amount").groupBy(
            "merchant"
        ).sum("amount").collect()
        frame.mapInArrow(lambda batches: batches, frame.schema).count()
        frame.unpersist()

    query = (
        session.readStream.schema("order_id BIGINT, merchant STRING, amount_cents BIGINT")
        .option("maxFilesPerTrigger", 1)
        .json(str(folder))
        .writeStream.option("checkpointLocation", str(work / "checkpoint"))
        .foreachBatch(batch)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    session.read.json(str(folder)).createOrReplaceTempView("source")
    session.sql("SELECT merchant, count(*), sum(amount_cents) FROM source GROUP BY 1").collect()
    session.stop()
    # The archive is written as the JVM exits, after this process would: wait for it.
    # (PySpark's gateway JVM exits when its stdin closes.)
    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)
    if gateway is not None and process is not None:
        gateway.shutdown()
        process.stdin.close()
        process.wait(timeout=300)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--workload"]:
        _workload(Path(sys.argv[2]), sys.argv[3])
    else:
        print(f"Spark class archive: {build()}")
