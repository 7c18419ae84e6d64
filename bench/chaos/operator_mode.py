"""Chaos in the operator mode: the real operator on the test control plane (etcd,
kube-apiserver, kube-controller-manager, the process kubelet), installed with the chart's RBAC,
runs the pipeline; the harness only breaks things and watches. Every recovery is the
operator's: it sees the driver pod fail or vanish, raises the fence, resolves, relaunches.

Faults: SIGKILL of the driver pod's processes; the operator SIGKILLed while it recovers from
that (restarted at once, as a Deployment would); a driver pod deleted through the API; an
immediate PostgreSQL restart; every sink session terminated; a writer task failing once; a
SIGKILL at a random protocol point (the last two through the fault file, which the node passes
to every pod's environment).
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from bench.chaos import audit as checks
from bench.chaos.run import TABLES, Plan, Summary, fault_loop, wait_until_delivered
from bench.chaos.stream import CHUNK, CHUNK_SECONDS, SCHEMA, Stream, file_emitter
from eo_jobs.pgserver import PgServer, temporary_server
from eo_jobs.protocol.faults import POINTS

NAMESPACE, NAME = "chaos", "orders"
SETTLE_SECONDS = 300.0


def manifest(work: Path) -> str:
    """The pipeline as a user would apply it (files -> append + upsert, exactly once)."""
    dsn = {"secretKeyRef": {"name": "chaos-db", "key": "dsn"}}
    doc: dict[str, Any] = {
        "apiVersion": "eo.dev/v1alpha1",
        "kind": "ExactlyOncePipeline",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {
            "guarantee": "exactly-once",
            "source": {
                "files": {
                    "path": str(work / "in"),
                    "format": "json",
                    "schema": SCHEMA,
                    "maxFilesPerTrigger": 8,
                }
            },
            "sinks": [
                {"name": "ledger", "postgres": {"dsn": dsn, "table": "public.ledger"}},
                {
                    "name": "latest",
                    "postgres": {
                        "dsn": dsn,
                        "table": "public.latest",
                        "mode": "upsert",
                        "keyColumns": ["order_id"],
                    },
                },
            ],
            "checkpoint": {"location": str(work / "checkpoint"), "triggerIntervalSeconds": 1},
            "driver": {"cores": 2, "memory": "768m"},
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


class OperatorChaos:
    """The cluster, the operator, the pipeline, and the faults that break them."""

    def __init__(self, cluster: Any, operator: Any, server: PgServer, dsn: str, work: Path):
        self.cluster = cluster
        self.operator = operator
        self.server = server
        self.dsn = dsn
        self.work = work
        self.fault_file = work / "fault.json"
        self.rng = random.Random()  # noqa: S311 - timing jitter only; seeded by the caller
        self.stalls = 0
        self.operator_restarts = 0

    def kubectl(self, *args: str, **kwargs: Any) -> Any:
        """kubectl against the test cluster (as its administrator)."""
        return self.cluster.kubectl(*args, **kwargs)

    def driver_pod(self) -> str | None:
        """The Running, not deleted, driver pod of the pipeline."""
        out = self.kubectl(
            "get", "pods", "-n", NAMESPACE, "-l", f"eo.dev/pipeline={NAME}", "-o", "json"
        )
        for pod in json.loads(out.stdout)["items"]:
            if pod["status"].get("phase") == "Running" and not pod["metadata"].get(
                "deletionTimestamp"
            ):
                return str(pod["metadata"]["name"])
        return None

    def epoch(self) -> str:
        """The pipeline's epoch annotation (for the progress lines)."""
        out = self.kubectl("get", "eop", NAME, "-n", NAMESPACE, "-o", "json", check=False)
        if out.returncode != 0:
            return "epoch ?"
        meta = json.loads(out.stdout)["metadata"]
        return f"epoch {meta.get('annotations', {}).get('eo.dev/epoch', '?')}"

    def _pause(self) -> None:
        time.sleep(self.rng.uniform(0.0, 2.5))

    def _running_driver(self) -> str:
        deadline = time.monotonic() + SETTLE_SECONDS
        while (pod := self.driver_pod()) is None:
            if time.monotonic() > deadline:
                raise TimeoutError("no running driver pod")
            time.sleep(0.5)
        return pod

    def arm(self, fault: dict[str, object]) -> None:
        """Arm a fault in the running driver (the node gave every pod EO_FAULT_FILE)."""
        tmp = self.fault_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(fault), encoding="utf-8")
        tmp.rename(self.fault_file)

    def disarm(self) -> None:
        """No fault armed."""
        self.fault_file.unlink(missing_ok=True)

    # The faults -----------------------------------------------------------------------------

    def driver_kill(self) -> str:
        """SIGKILL every process of the driver pod (the container dies)."""
        pod = self._running_driver()
        self._pause()
        with contextlib.suppress(LookupError, ProcessLookupError):
            self.cluster.kubelet.kill(NAMESPACE, pod, signal.SIGKILL)
        return "killed"

    def operator_kill(self) -> str:
        """Kill the driver, then SIGKILL the operator in the middle of its recovery."""
        pod = self._running_driver()
        with contextlib.suppress(LookupError, ProcessLookupError):
            self.cluster.kubelet.kill(NAMESPACE, pod, signal.SIGKILL)
        time.sleep(self.rng.uniform(0.0, 3.0))
        self.operator.stop(signal.SIGKILL)
        self.operator.start()
        self.operator_restarts += 1
        return "operator-restarted"

    def pod_delete(self) -> str:
        """Delete the driver pod through the API (an eviction, a drain, a person)."""
        pod = self._running_driver()
        self._pause()
        self.kubectl("delete", "pod", pod, "-n", NAMESPACE, "--wait=false", check=False)
        return "deleted"

    def pg_restart(self) -> str:
        """PostgreSQL crashes and restarts (immediate mode)."""
        self._pause()
        self.server.restart("immediate")
        return "restarted"

    def drop_connections(self) -> str:
        """Terminate every other session of the sink database."""
        self._pause()
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
        return f"ended-{row[0] if row else 0}"

    def task_failure(self) -> str:
        """A writer task raises once after preparing; Spark retries it."""
        target = checks.last_batch(self.dsn) + 2
        self.arm({"point": "after-some-prepared", "batch": target, "action": "raise"})
        self._until_batch(target)
        self.disarm()
        return "armed"

    def crash_point(self) -> str:
        """SIGKILL of the driver at a random protocol point of an upcoming batch."""
        point = self.rng.choice(POINTS)
        target = checks.last_batch(self.dsn) + 2
        self.arm({"point": point, "batch": target, "action": "kill"})
        self._until_batch(target)
        self.disarm()
        return point

    def _until_batch(self, batch: int) -> None:
        deadline = time.monotonic() + SETTLE_SECONDS
        while checks.last_batch(self.dsn) < batch and time.monotonic() < deadline:
            time.sleep(0.3)

    def settle(self) -> None:
        """Until the operator has the pipeline deciding batches again (else: a stall)."""
        before = checks.last_batch(self.dsn)
        deadline = time.monotonic() + SETTLE_SECONDS
        while checks.last_batch(self.dsn) <= before:
            if time.monotonic() > deadline:
                self.stalls += 1
                return
            time.sleep(0.3)


KINDS: dict[str, Callable[[OperatorChaos], str]] = {
    "driver-kill": OperatorChaos.driver_kill,
    "operator-kill": OperatorChaos.operator_kill,
    "pod-delete": OperatorChaos.pod_delete,
    "pg-restart": OperatorChaos.pg_restart,
    "drop-connections": OperatorChaos.drop_connections,
    "task-failure": OperatorChaos.task_failure,
    "crash-point": OperatorChaos.crash_point,
}


def run_operator(plan: Plan, work: Path) -> Summary:
    """The whole operator-mode run."""
    from tests.cluster.plugin import start_cluster
    from tests.operator.cluster_env import installed_operator

    started = time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o755)
    (work / "logs").mkdir(exist_ok=True)
    node_env = {"EO_FAULT_FILE": str(work / "fault.json")}
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(temporary_server())
        cluster, clients = start_cluster(work / "cluster", node_env=node_env)
        stack.callback(cluster.control_plane.stop)
        for api in clients:
            stack.enter_context(api)
        stack.callback(cluster.stop_kubelets)
        operator = stack.enter_context(installed_operator(cluster, work / "logs"))
        dsn = server.create_database("chaos")
        with psycopg.connect(dsn, autocommit=True) as conn:
            for ddl in TABLES:
                conn.execute(ddl)
        cluster.kubectl("create", "namespace", NAMESPACE)
        cluster.kubectl(
            "create", "secret", "generic", "chaos-db", "-n", NAMESPACE, f"--from-literal=dsn={dsn}"
        )
        chaos = OperatorChaos(cluster, operator, server, dsn, work)
        chaos.rng.seed(plan.seed)
        emit = file_emitter(work / "in")
        stream = Stream(emit, plan.seed, per_file=CHUNK, interval=CHUNK_SECONDS)
        stack.callback(stream.stop)
        for _ in range(3):
            stream.write_file()
        stream.start()
        cluster.kubectl("apply", "-f", "-", input=manifest(work))
        chaos.settle()
        done, outcomes, seen = fault_loop(
            plan,
            lambda kind: KINDS[kind](chaos),
            chaos.settle,
            dsn,
            chaos.epoch,
            started,
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
        findings = checks.audit(dsn, stream.truth, [])
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
        )
