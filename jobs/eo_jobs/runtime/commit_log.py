"""The latest batch Spark's commit log holds, wherever the checkpoint lives.

Every batch Spark commits was decided first (``foreachBatch`` returns only after its decision,
or its ``record()`` in the modes without two-phase commit), so the decision log must hold the
latest one. A checkpoint ahead of the decision log means the control database is not the one
the checkpoint ran against: a sink DSN re-pointed at an empty database, a control database
restored from a backup, decisions lost in an asynchronous failover. The driver checks this at
start-up (``Coordinator.check_checkpoint``) before recovery, which would otherwise roll back
the prepared participants of the batches the log lacks, and Spark would never replay them.

Spark keeps only its last ``minBatchesToRetain`` commit files, so the latest is found by
listing ``commits/`` (a local folder directly, any other URI through the Spark session's
Hadoop FileSystem, as ``runtime.checkpoint`` reads files), not by probing from batch 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pyspark.sql import SparkSession

from eo_jobs.runtime.checkpoint import CheckpointLog, local_path


def spark_committed(checkpoint: CheckpointLog, spark: SparkSession) -> tuple[str, int] | None:
    """(query id, latest batch) Spark's commit log holds, or None for a checkpoint without
    committed batches (a new one)."""
    latest = latest_commit(checkpoint.location, spark)
    return None if latest is None else (checkpoint.query_id(), latest)


def latest_commit(location: str, spark: SparkSession) -> int | None:
    """The highest batch id in ``<location>/commits``, or None when Spark committed none."""
    folder = local_path(location)
    if folder is not None:
        commits = folder / "commits"
        names: Iterable[str] = (p.name for p in commits.iterdir()) if commits.is_dir() else ()
    else:
        names = _hadoop_names(f"{location.rstrip('/')}/commits", spark)
    batches = [int(name) for name in names if name.isdigit()]
    return max(batches, default=None)


def _hadoop_names(location: str, spark: SparkSession) -> list[str]:
    """Names of the files in a folder of the session's Hadoop FileSystem ([] if absent)."""
    jvm: Any = spark._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    path = jvm.org.apache.hadoop.fs.Path(location)
    fs = path.getFileSystem(conf)
    if not fs.exists(path):
        return []
    return [str(status.getPath().getName()) for status in fs.listStatus(path)]
