"""Chaos in the operator mode: the real operator on the test control plane (etcd,
kube-apiserver, kube-controller-manager, two process kubelets), installed with the chart's
RBAC, runs the pipeline; the harness only breaks things and watches (``operator_faults``).
Every recovery is the operator's: it sees the driver pod fail, vanish or its node go silent,
raises the fence, resolves, relaunches.

With ``--executors N`` the pipeline runs Spark on Kubernetes with N executor pods, as a user
would set it up: the chart's driver ServiceAccount and Role in the pipeline's namespace, the
input and the checkpoint on a ReadWriteMany claim (a hostPath volume here) that eo mounts on
the driver and every executor.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

from bench import fast_jvm
from bench.chaos import audit as checks
from bench.chaos.continuous import ContinuousAudit, chaos_target
from bench.chaos.operator_faults import KINDS, NAME, NAMESPACE, OperatorChaos
from bench.chaos.run import TABLES, Plan, Summary, fault_loop, wait_until_delivered
from bench.chaos.stream import CHUNK, CHUNK_SECONDS, SCHEMA, Stream, file_emitter
from eo_jobs.pgserver import temporary_server

CLAIM = "chaos-data"
DRIVER_ACCOUNT = "eo-driver"
"""The chart's driver ServiceAccount (release ``eo``), made in ``driver.namespaces``."""
NODE_LOST_GRACE_SECONDS = 5
"""The operator's node-lost grace (``EO_NODE_LOST_GRACE_SECONDS``; the chart's default is 30):
with the test control plane's 15 s node-monitor grace, a partitioned driver is replaced ~20 s
after its node went silent."""


def manifest(work: Path, executors: int = 0) -> str:
    """The pipeline as a user would apply it (files -> append, upsert and accumulate, exactly
    once); with ``executors``, the input and checkpoint are on the claim, mounted at
    ``work/mnt``."""
    dsn = {"secretKeyRef": {"name": "chaos-db", "key": "dsn"}}
    data = work / "mnt" if executors else work / "data"
    driver: dict[str, Any] = {"cores": 2, "memory": "768m"}
    spec: dict[str, Any] = {}
    if executors:
        driver = {
            "cores": 1,
            "memory": "768m",
            "serviceAccount": DRIVER_ACCOUNT,
            "volumeClaim": CLAIM,
            "volumeMountPath": str(data),
        }
        spec["executors"] = {"instances": executors, "cores": 1, "memory": "512m"}
    doc: dict[str, Any] = {
        "apiVersion": "eo.dev/v1alpha1",
        "kind": "ExactlyOncePipeline",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {
            "guarantee": "exactly-once",
            "source": {
                "files": {
                    "path": str(data / "in"),
                    "format": "json",
                    "schema": SCHEMA,
                    # Catching up after a relaunch (and the final drain) is batches of up to
                    # 16 chunks: with executors on a loaded machine a batch of 8 took ~10 s,
                    # barely more than the stream brings in that time.
                    "maxFilesPerTrigger": 16,
                }
            },
            "sinks": [
                {
                    "name": "ledger",
                    "postgres": {
                        "dsn": dsn,
                        "table": "public.ledger",
                        "sumColumns": ["amount_cents"],
                    },
                },
                {
                    "name": "latest",
                    "postgres": {
                        "dsn": dsn,
                        "table": "public.latest",
                        "mode": "upsert",
                        "keyColumns": ["order_id"],
                    },
                },
                {
                    "name": "totals",
                    "transform": {"sql": checks.TOTALS_SQL},
                    "postgres": {
                        "dsn": dsn,
                        "table": "public.merchant_totals",
                        "mode": "accumulate",
                        "keyColumns": ["merchant"],
                        "addColumns": ["volume_cents", "orders"],
                        "sumColumns": ["volume_cents", "orders"],
                    },
                },
            ],
            "checkpoint": {"location": str(data / "checkpoint"), "triggerIntervalSeconds": 1},
            "driver": driver,
            # Drivers here live for seconds, as the harness's own (bench.fast_jvm).
            "sparkConf": {"spark.driver.extraJavaOptions": fast_jvm.java_options()},
            **spec,
            # Every fault here is a failure the operator must recover from, without giving up.
            "restartPolicy": {
                "maxRestarts": 1000,
                "backoffSeconds": 1,
                "maxBackoffSeconds": 2,
                "windowSeconds": 60,
            },
        },
    }
    return json.dumps(doc)


def claim(host: Path) -> str:
    """A ReadWriteMany hostPath PersistentVolume on ``host``, pre-bound to the claim."""
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": CLAIM},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "hostPath": {"path": str(host), "type": "Directory"},
            "claimRef": {"namespace": NAMESPACE, "name": CLAIM},
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": CLAIM, "namespace": NAMESPACE},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    return json.dumps({"kind": "List", "apiVersion": "v1", "items": [pv, pvc]})


def run_operator(plan: Plan, work: Path) -> Summary:
    """The whole operator-mode run."""
    from tests.cluster.plugin import start_cluster
    from tests.operator.cluster_env import installed_operator

    started = time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o755)
    (work / "logs").mkdir(exist_ok=True)
    data = work / "data"
    data.mkdir(exist_ok=True)
    node_env = {"EO_FAULT_FILE": str(work / "fault.json")}
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(temporary_server())
        cluster, clients = start_cluster(work / "cluster", node_env=node_env)
        stack.callback(cluster.control_plane.stop)
        for api in clients:
            stack.enter_context(api)
        stack.callback(cluster.stop_kubelets)
        # The chart grants the driver its Role in namespaces that exist when it is installed.
        cluster.kubectl("create", "namespace", NAMESPACE)
        operator = stack.enter_context(
            installed_operator(
                cluster,
                work / "logs",
                chart_values=(f"driver.namespaces={{{NAMESPACE}}}",),
                EO_NODE_LOST_GRACE_SECONDS=str(NODE_LOST_GRACE_SECONDS),
            )
        )
        dsn = server.create_database("chaos")
        with psycopg.connect(dsn, autocommit=True) as conn:
            for ddl in TABLES:
                conn.execute(ddl)
        cluster.kubectl(
            "create", "secret", "generic", "chaos-db", "-n", NAMESPACE, f"--from-literal=dsn={dsn}"
        )
        if plan.executors:
            cluster.kubectl("apply", "-f", "-", input=claim(data))
        chaos = OperatorChaos(cluster, operator, server, dsn, work)
        chaos.rng.seed(plan.seed)
        emit = file_emitter(data / "in")
        stream = Stream(emit, plan.seed, per_file=CHUNK, interval=CHUNK_SECONDS)
        stack.callback(stream.stop)
        for _ in range(3):
            stream.write_file()
        stream.start()
        cluster.kubectl("apply", "-f", "-", input=manifest(work, plan.executors))
        chaos.settle()
        auditor = ContinuousAudit(chaos_target(f"{NAMESPACE}/{NAME}", dsn, data / "checkpoint"))
        done, outcomes, seen = fault_loop(
            plan,
            lambda kind: KINDS[kind](chaos),
            chaos.settle,
            dsn,
            chaos.epoch,
            started,
            auditor,
        )
        stream.stop()
        chaos.disarm()
        wait_until_delivered(dsn, len(stream.truth.valid), lambda: None)
        cluster.kubectl(
            "patch", "eop", NAME, "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"suspend":true}}'
        )
        deadline = time.monotonic() + 300
        while chaos.driver_pod() is not None and time.monotonic() < deadline:
            time.sleep(1)
        time.sleep(5)  # the suspend's recovery resolves what the last driver left
        auditor.finish()
        findings = checks.audit(dsn, stream.truth, checks.decided_batches(dsn))
        return Summary(
            seed=plan.seed,
            faults=done,
            outcomes=outcomes,
            findings=findings,
            relaunches=Counter({"operator restarts": chaos.operator_restarts}),
            stalls=chaos.stalls,
            duplicates_seen=seen,
            seconds=time.monotonic() - started,
            records=len(stream.truth.valid),
            audit=auditor,
        )
