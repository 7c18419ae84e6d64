"""Fence the writes of Spark's checkpoint by epoch, as the sink fence fences decisions.

A driver frozen past its recovery (SIGSTOP, a stalled node) resumes where it stopped, and its
stream writes the next batch's offsets before any eo code runs. The sink fence stops it only at
its decision; meanwhile it could take the batch id the live driver was about to log, and the
live driver's query failed with "Concurrent update to the log" (one extra restart, 1 in 312
faults of the chaos run of record). So, once the sink fence is raised, a driver records its
epoch in the checkpoint (``eo-fence/<epoch>``) and has Spark write the checkpoint through eo's
``FencedCheckpointFileManager`` (``jvm/writer``), which refuses every log write once a higher
epoch is recorded. A zombie's stream then fails before it writes anything, and the driver
exits as fenced (75). Without eo's JVM jar (``./dev demo``'s minimal set-up) the checkpoint is
written unfenced, as before, and ``arm`` says so.
"""

from __future__ import annotations

from typing import Any

from py4j.java_gateway import JavaClass  # type: ignore[import-untyped]
from pyspark.sql import SparkSession

from eo_jobs.protocol.errors import FencedError
from eo_jobs.runtime.session import CHECKPOINT_MANAGER_KEY

FENCE_FOLDER = "eo-fence"
MANAGER = "dev.eo.writer.FencedCheckpointFileManager"
EPOCH_KEY = "eo.checkpoint.epoch"
FENCE_KEY = "eo.checkpoint.fence"
DELEGATE_KEY = "eo.checkpoint.delegate"
FENCED_MESSAGE = "eo: checkpoint fenced"
"""How the JVM class starts the message of a refused write (``FencedCheckpointFileManager``)."""


def arm(spark: SparkSession, location: str, pipeline: str, epoch: int) -> str | None:
    """Record ``epoch`` in the checkpoint and fence its writes; None when armed, else why not.

    Raises ``FencedError`` when the checkpoint already records a higher epoch: this driver was
    replaced before it started its query.
    """
    jvm: Any = spark._jvm
    manager = jvm.dev.eo.writer.FencedCheckpointFileManager
    if not isinstance(manager, JavaClass):
        return f"{MANAGER} is not on Spark's class path (eo's JVM jar is not built)"
    fence_location = f"{location.rstrip('/')}/{FENCE_FOLDER}"
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    fence = jvm.org.apache.hadoop.fs.Path(fence_location)
    before = int(manager.claim(fence, conf, epoch))
    if before > epoch:
        raise FencedError(pipeline, epoch, before)
    delegate = spark.conf.get(CHECKPOINT_MANAGER_KEY, None)
    if delegate and delegate != MANAGER:
        spark.conf.set(DELEGATE_KEY, delegate)
    spark.conf.set(EPOCH_KEY, str(epoch))
    spark.conf.set(FENCE_KEY, fence_location)
    spark.conf.set(CHECKPOINT_MANAGER_KEY, MANAGER)
    return None


def newer_epoch(spark: SparkSession, location: str, epoch: int) -> int | None:
    """The epoch recorded in the checkpoint's fence folder when it is above ``epoch``, else None.

    Asked when a query failed for any reason: a zombie woken between its fence check and
    Spark's rename fails on Spark's own "destination already exists" (nothing written), and
    that is a fenced driver too, not a crash for the operator to count. None when the fence
    class is absent (an unfenced checkpoint records no epochs).
    """
    jvm: Any = spark._jvm
    manager = jvm.dev.eo.writer.FencedCheckpointFileManager
    if not isinstance(manager, JavaClass):
        return None
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    fence = jvm.org.apache.hadoop.fs.Path(f"{location.rstrip('/')}/{FENCE_FOLDER}")
    recorded = int(manager.fenceEpoch(fence, conf))
    return recorded if recorded > epoch else None


def fenced(exc: BaseException) -> bool:
    """Whether a query failed because its checkpoint write was fenced (at any depth)."""
    seen: BaseException | None = exc
    while seen is not None:
        if FENCED_MESSAGE in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
