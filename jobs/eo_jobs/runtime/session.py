"""The SparkSession of a driver: local mode inside the pod, or Spark on Kubernetes.

``executors.instances == 0`` runs ``local[cores]`` inside the driver process (writer tasks are
then threads of the driver's JVM with Python workers beside it). Otherwise the master is the
Kubernetes API server the pod runs under, with executor pods owned by the driver pod, the way
spark-submit's Kubernetes mode does it, using the image and pod name the operator put in the
environment.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from eo_jobs.runtime.checkpoint import local_path
from eo_jobs.runtime.packages import hadoop_aws_jars, kafka_connector_jars, writer_jars
from eo_jobs.spec import pod_template, s3
from eo_jobs.spec.models import EXECUTOR_CONTAINER, PipelineSpec

TASK_MAX_FAILURES = 4
DRIVER_PORT = 7078
"""The driver's RPC port (executors register here); the driver Service's ``driver`` port."""
BLOCK_MANAGER_PORT = 7079
"""The driver's block manager port; the driver Service's ``blockmanager`` port."""
UI_PORT = 4040
"""The Spark UI's port; the driver Service's and container's ``ui`` port."""
DATA_VOLUME = "data"
"""Volume name of ``spec.driver.volumeClaim`` on the driver pod, and on executors."""
EXECUTOR_LABELS: Mapping[str, str] = {
    "app.kubernetes.io/name": "eo",
    "app.kubernetes.io/managed-by": "eo",
    "app.kubernetes.io/component": "executor",
}
"""Labels of every executor pod, beside Spark's own (``spark-role: executor``, which any Spark
application's executors carry): what the chart's executor NetworkPolicy selects, and what lets
the driver's policy admit its executors and no other pod. ``component: executor`` keeps them out
of the operator's watch of driver pods (``eo_operator.resources.DRIVER_POD_SELECTOR``); no
``eo.dev/pipeline`` label, which lists a pipeline's driver pods. Set through
``spark.kubernetes.executor.label.*``, which Spark adds to every executor pod it builds and
which ``sparkConf`` may not set (``spark.kubernetes.*`` is eo's)."""


def executor_volume_conf(spec: PipelineSpec) -> dict[str, str]:
    """Mount the driver's claim on every executor too, at the same path.

    Executors read a files source themselves (Spark plans file splits on the driver and reads
    them in tasks), so its folder must be on them; the claim must then be ReadWriteMany unless
    every pod lands on one node. A checkpoint on it is only ever written by the driver.
    """
    claim = spec.driver.volume_claim
    if not claim:
        return {}
    prefix = f"spark.kubernetes.executor.volumes.persistentVolumeClaim.{DATA_VOLUME}"
    return {
        f"{prefix}.mount.path": spec.driver.volume_mount_path,
        f"{prefix}.options.claimName": claim,
    }


THROUGHPUT_GC = "-XX:+UseParallelGC"
"""The JVM's throughput collector, in place of its default (G1); see ``write_path_defaults``."""
WRITE_PATH_CONF = {
    "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
    # Int.MaxValue: the one value at which Spark does not size the batch after every row.
    "spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1),
    "spark.sql.files.maxPartitionBytes": str(1 << 30),
    "spark.python.daemon.module": "eo_jobs.runtime.pydaemon",
    "spark.driver.extraJavaOptions": THROUGHPUT_GC,
    "spark.executor.extraJavaOptions": THROUGHPUT_GC,
}
"""The write-path settings every pipeline gets (``write_path_defaults`` says why)."""
CHECKPOINT_MANAGER_KEY = "spark.sql.streaming.checkpointFileManagerClass"
LOCAL_CHECKPOINT_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)
"""Spark's checkpoint writer on Hadoop's FileSystem API, for a checkpoint in a local folder."""
LOCAL_FILE_SYSTEM_KEY = "spark.hadoop.fs.file.impl"
RAW_LOCAL_FILE_SYSTEM = "org.apache.hadoop.fs.RawLocalFileSystem"
"""Hadoop's local file system without ``.crc`` side files, for ``file:`` paths."""


def write_path_defaults(spec: PipelineSpec) -> dict[str, str]:
    """eo's defaults for a batch's path: the write, the source's listing, the checkpoint's logs.

    bench/README.md has the before/after figures.

    - Arrow batches of 20,000 records (Spark's 10,000) and no byte cap. Unless
      ``spark.sql.execution.arrow.maxBytesPerBatch`` is exactly Int.MaxValue, Spark sizes the
      Arrow batch after every row it adds (every column vector's buffers); its own default,
      64 MiB, keeps that on. It was in 52 of 267 writer-task samples at 200,000 rows per batch
      and 71 of 685 at 1,000,000 (JFR). 20,000 records ran as fast as 100,000 and hold a fifth
      of the memory per batch (about 20 MB for 1 KiB rows); set either key in ``sparkConf``
      for wider rows.
    - Files split per core, not at 128 MiB: a batch is coalesced to ``writerPartitions``
      tasks anyway, and 5 file splits coalesced into 2 writers leave one writer with 3/5 of
      the batch; at most 1 GiB per split still splits a huge batch.
    - Python workers forked by ``eo_jobs.runtime.pydaemon``, which keeps Spark's archives off
      their path (~0.1 s per writer task, see that module).
    - A file source on a local or mounted folder lists its batch's files in the driver: above
      32 paths Spark otherwise runs a listing job per micro-batch (0.5-0.7 s per
      1,000,000-row batch of 100 files here, a fifth of the trigger). A store (any other
      ``scheme://``: s3a, gs, abfs, hdfs, ...) keeps it: there a listing is a round trip.
    - A checkpoint in a local or mounted folder is written through Hadoop's FileSystem API
      instead of FileContext. Without Hadoop's native library (PySpark ships none) FileContext's
      rename checks the target by running a ``readlink`` process per path component: about 25
      processes per micro-batch for the offset, commit and source logs, ~50 ms of every
      trigger here (JFR ``jdk.ProcessStart``). On a local file system both managers do the same
      thing, check that the target is absent, then rename(2); a store keeps Spark's choice
      (FileContext, whose rename is atomic on HDFS).
    - With a local checkpoint, ``file:`` paths go through Hadoop's raw local file system, not
      its checksummed wrapper. Without the native library Hadoop sets the mode of every file
      it creates by running a ``chmod`` process, and the wrapper creates a ``.crc`` file next
      to each one: 6 processes per micro-batch for the offset, commit and source logs, 3
      without the ``.crc`` files (JFR ``jdk.ProcessStart``). That took the three log writes
      from 14, 11 and 13 ms to 8, 6 and 9 ms (median of batches 5-19, 200,000-row batches, 3
      runs each). What is lost is the ``.crc`` files, which only checked a checkpoint file
      when it was read back; a checkpoint that does not match the decision log is refused
      anyway (``CheckpointMismatchError``). ``hadoopConf`` ``fs.file.impl`` replaces this
      default.
    - The driver and executor JVMs collect garbage with the parallel (throughput) collector,
      not G1: a micro-batch allocates and drops its rows and Arrow buffers in one burst, which
      G1's concurrent marking and write barriers tax. It cut a 200,000-row cycle from 0.565 to
      0.533 s here (Spark's JDBC writer: no change). Its pauses are all stop-the-world; a
      pipeline that prefers G1 sets ``spark.driver.extraJavaOptions`` (and the executors') in
      ``sparkConf``, which replaces this default.
    """
    conf = dict(WRITE_PATH_CONF)
    files = spec.source.files
    if files is not None and local_path(files.path) is not None:
        conf["spark.sql.sources.parallelPartitionDiscovery.threshold"] = "100000"
    if local_path(spec.checkpoint.location) is not None:
        conf[CHECKPOINT_MANAGER_KEY] = LOCAL_CHECKPOINT_MANAGER
        conf[LOCAL_FILE_SYSTEM_KEY] = RAW_LOCAL_FILE_SYSTEM
    return conf


def spark_conf(
    spec: PipelineSpec, app_name: str, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The Spark configuration for a pipeline (pure, so it can be tested without a JVM)."""
    env = os.environ if environ is None else environ
    # eo's defaults, then the user's settings, then what eo manages (validation refuses those
    # keys in sparkConf/hadoopConf; here they win anyway).
    conf: dict[str, str] = {
        # The UI is on (sparkConf spark.ui.enabled: "false" turns it off) and read-only: it
        # has no authentication, and a job killed from it fails the batch attempt.
        "spark.ui.enabled": "true",
        "spark.ui.killEnabled": "false",
        "spark.sql.shuffle.partitions": str(max(2, spec.driver.cores * 2)),
        **write_path_defaults(spec),
        **spec.spark_conf,
        **{f"spark.hadoop.{key}": value for key, value in spec.hadoop_conf.items()},
    }
    conf |= {
        "spark.app.name": app_name,
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": spec.driver.memory,
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
        "spark.task.maxFailures": str(TASK_MAX_FAILURES),
        "spark.speculation": "false",
        # The port the driver container and Service declare (another process holding it, as on
        # a machine running several drivers, moves the UI to the next free one).
        "spark.ui.port": str(UI_PORT),
        # Writer tasks import eo_jobs: run them with this interpreter, not whatever python3 is
        # first on PATH.
        "spark.pyspark.python": env.get("PYSPARK_PYTHON", sys.executable),
        "spark.pyspark.driver.python": sys.executable,
    }
    if spec.executors.instances == 0:
        # local[N] alone never retries a failed task (Spark's local mode allows one failure);
        # local[N,F] gives writer tasks the same retries as on a cluster.
        conf["spark.master"] = f"local[{spec.driver.cores},{TASK_MAX_FAILURES}]"
        # Local mode talks to nobody else: stay on loopback.
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    else:
        host = env.get("KUBERNETES_SERVICE_HOST", "kubernetes.default.svc")
        port = env.get("KUBERNETES_SERVICE_PORT", "443")
        conf.update(
            {
                "spark.master": f"k8s://https://{host}:{port}",
                "spark.submit.deployMode": "client",
                "spark.executor.instances": str(spec.executors.instances),
                "spark.executor.cores": str(spec.executors.cores),
                "spark.executor.memory": spec.executors.memory,
                "spark.kubernetes.namespace": env.get("POD_NAMESPACE", "default"),
                "spark.kubernetes.driver.pod.name": env.get("POD_NAME", ""),
                "spark.kubernetes.container.image": env.get(
                    "EO_JOB_IMAGE", spec.driver.image or ""
                ),
                # Executors call the driver back at its pod IP (the headless Service's name
                # as a fallback): an address that exists as soon as the pod runs, where DNS
                # may lag; it listens on every interface of the pod, at the ports its Service
                # and container declare (resources.DRIVER_PORT, BLOCK_MANAGER_PORT).
                "spark.driver.host": env.get("POD_IP") or env.get("EO_DRIVER_HOST", ""),
                "spark.driver.bindAddress": "0.0.0.0",  # noqa: S104 (the pod's own interfaces)
                "spark.driver.port": str(DRIVER_PORT),
                "spark.driver.blockManager.port": str(BLOCK_MANAGER_PORT),
                "spark.kubernetes.executor.podNamePrefix": env.get("POD_NAME", "eo-driver"),
                # eo mounts no on-demand claims on executors: Spark need not list or own PVCs
                # (the driver Role grants no access to them).
                "spark.kubernetes.driver.ownPersistentVolumeClaim": "false",
                "spark.kubernetes.driver.reusePersistentVolumeClaim": "false",
                **executor_volume_conf(spec),
                **{
                    f"spark.kubernetes.executor.label.{key}": value
                    for key, value in EXECUTOR_LABELS.items()
                },
            }
        )
    java_options = env.get("EO_SPARK_DRIVER_JAVA_OPTIONS")
    if java_options:
        conf["spark.driver.extraJavaOptions"] = java_options
    jars = kafka_connector_jars() if spec.source.kafka is not None else []
    if s3.uses_s3(spec.checkpoint):
        jars += hadoop_aws_jars()
        conf.update(s3.hadoop_conf(spec.checkpoint))
    writer = writer_jars()
    if not isinstance(writer, str):  # eo's JVM writer (runtime.jvm_writer), when built
        jars += writer
    if jars:
        conf["spark.jars"] = ",".join(str(p) for p in jars)
    return conf


def executor_template_conf(spec: PipelineSpec, folder: Path) -> dict[str, str]:
    """Write the executor pod template where Spark reads it; the settings that point at it.

    Spark on Kubernetes merges a pod template file into every executor pod it creates, taking
    the container named here as the executor's own. eo's template carries the security floor
    the driver pod has (Spark sets none of it) with ``spec.executors.podTemplate`` laid over it.
    """
    if spec.executors.instances == 0:
        return {}
    assigned = os.environ.get(pod_template.ASSIGNED_UID_ENV, "").lower() == "true"
    document = pod_template.secure_pod(EXECUTOR_CONTAINER, assigned)
    template = spec.executors.pod_template
    if template is not None:
        document = pod_template.merged(
            document, template.model_dump(by_alias=True), EXECUTOR_CONTAINER
        )
    if not document["metadata"]:
        del document["metadata"]
    path = folder / "executor-pod-template.yaml"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "Pod", **document}), encoding="utf-8")
    return {
        "spark.kubernetes.executor.podTemplateFile": str(path),
        "spark.kubernetes.executor.podTemplateContainerName": EXECUTOR_CONTAINER,
    }


def build_session(spec: PipelineSpec, app_name: str) -> SparkSession:
    """Create (or reuse) the SparkSession for ``spec``."""
    # The worker launcher reads PYSPARK_PYTHON from the environment, not only the conf.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # S3 keys reach the JVM through its environment, never its (command-line) configuration.
    os.environ.update(s3.credential_env(spec.checkpoint, os.environ))
    builder = SparkSession.builder
    folder = Path(tempfile.mkdtemp(prefix="eo-spark-"))
    settings = {**spark_conf(spec, app_name), **executor_template_conf(spec, folder)}
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(os.environ.get("EO_SPARK_LOG_LEVEL", "WARN"))
    return session
