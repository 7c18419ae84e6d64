"""The faults of the operator mode, injected into the test control plane while the real operator
runs the pipeline (``operator_mode`` sets the scene). The harness only breaks things and
watches; every recovery is the operator's (or Spark's, for a lost executor).

Faults: SIGKILL of the driver pod's processes; the operator SIGKILLed while it recovers from
that (restarted at once, as a Deployment would); a driver pod deleted through the API; an
immediate PostgreSQL restart; every sink session terminated; a writer task failing once; a
SIGKILL at a random protocol point (the last two through the fault file, which the node passes
to every pod's environment); with executors, an executor pod deleted in the middle of a task;
and the driver's node partitioned from the API server (its processes run on as zombies) until
the operator has fenced the driver and a driver on the other node has decided a batch. And the
week-to-week changes: a valid spec edit (a restart at a batch boundary with a new epoch), an
edit eo refuses (the driver keeps running the last good spec, then the edit is reverted), and
the operator restarted gracefully, as a rolling upgrade does (no driver restarts).
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from bench.chaos import audit as checks
from eo_jobs.pgserver import PgServer
from eo_jobs.protocol.errors import EXIT_FENCED
from eo_jobs.protocol.faults import POINTS

NAMESPACE, NAME = "chaos", "orders"
SETTLE_SECONDS = 300.0
BUSY_EXECUTOR_SECONDS = 20.0
"""How long ``executor-delete`` looks for an executor with a task open before taking any."""
ZOMBIE_FENCED_SECONDS = 15.0
"""How long ``node-partition`` gives the zombie, once the new epoch decided, to meet the fence
and exit on its own before the node is healed (healing kills it in any case)."""
NODE_HEALTHY_SECONDS = 120.0
POINT_AFTER_DECISION_SECONDS = 10.0
"""How long ``crash-point`` waits for the driver to die once the target batch is decided (the
points after the decision come within milliseconds of it)."""

_STARTED = re.compile(r"Running task \S+ in stage \S+ \(TID (\d+)\)")
_FINISHED = re.compile(r"Finished task \S+ in stage \S+ \(TID (\d+)\)")


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

    def _pods(self, selector: str) -> list[dict[str, Any]]:
        out = self.kubectl("get", "pods", "-n", NAMESPACE, "-l", selector, "-o", "json")
        return [
            pod
            for pod in json.loads(out.stdout)["items"]
            if pod["status"].get("phase") == "Running"
            and not pod["metadata"].get("deletionTimestamp")
        ]

    def driver_pod(self) -> dict[str, Any] | None:
        """The Running, not deleted, driver pod of the pipeline."""
        return next(iter(self._pods(f"eo.dev/pipeline={NAME}")), None)

    def executor_pods(self, driver: str) -> list[dict[str, Any]]:
        """The Running, not deleted, executor pods the driver pod ``driver`` owns."""
        return [
            pod
            for pod in self._pods("spark-role=executor")
            if any(o.get("name") == driver for o in pod["metadata"].get("ownerReferences") or [])
        ]

    def epoch_number(self) -> int:
        """The pipeline's epoch annotation (0 before the first launch)."""
        out = self.kubectl("get", "eop", NAME, "-n", NAMESPACE, "-o", "json")
        meta = json.loads(out.stdout)["metadata"]
        return int(meta.get("annotations", {}).get("eo.dev/epoch", 0))

    def epoch(self) -> str:
        """The pipeline's epoch annotation (for the progress lines)."""
        try:
            return f"epoch {self.epoch_number()}"
        except Exception:  # a progress line must not end the run
            return "epoch ?"

    def _pause(self) -> None:
        time.sleep(self.rng.uniform(0.0, 2.5))

    def _running_driver(self) -> dict[str, Any]:
        deadline = time.monotonic() + SETTLE_SECONDS
        while (pod := self.driver_pod()) is None:
            if time.monotonic() > deadline:
                raise TimeoutError("no running driver pod")
            time.sleep(0.5)
        return pod

    def _kubelet(self, pod: dict[str, Any]) -> Any:
        """The process kubelet of the node the pod runs on."""
        return self.cluster.kubelet_on(pod["spec"]["nodeName"])

    def _kill(self, pod: dict[str, Any]) -> None:
        with contextlib.suppress(LookupError, ProcessLookupError):
            self._kubelet(pod).kill(NAMESPACE, pod["metadata"]["name"], signal.SIGKILL)

    def arm(self, fault: dict[str, object]) -> None:
        """Arm a fault in the running driver (the node gave every pod EO_FAULT_FILE)."""
        tmp = self.fault_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(fault), encoding="utf-8")
        tmp.rename(self.fault_file)

    def disarm(self) -> None:
        """No fault armed."""
        self.fault_file.unlink(missing_ok=True)

    def highest_decided_epoch(self) -> int:
        """The highest epoch any decision of the pipeline was made in (0 before any)."""
        with psycopg.connect(self.dsn) as conn:
            row = conn.execute(
                "SELECT coalesce(max(epoch), 0) FROM eo.decisions WHERE pipeline = %s",
                (checks.PIPELINE,),
            ).fetchone()
        return int(row[0]) if row else 0

    # The faults -----------------------------------------------------------------------------

    def driver_kill(self) -> str:
        """SIGKILL every process of the driver pod (the container dies)."""
        pod = self._running_driver()
        self._pause()
        self._kill(pod)
        return "killed"

    def operator_kill(self) -> str:
        """Kill the driver, then SIGKILL the operator in the middle of its recovery."""
        self._kill(self._running_driver())
        time.sleep(self.rng.uniform(0.0, 3.0))
        self.operator.stop(signal.SIGKILL)
        self.operator.start()
        self.operator_restarts += 1
        return "operator-restarted"

    def pod_delete(self) -> str:
        """Delete the driver pod through the API (an eviction, a drain, a person)."""
        pod = self._running_driver()
        self._pause()
        name = pod["metadata"]["name"]
        self.kubectl("delete", "pod", name, "-n", NAMESPACE, "--wait=false", check=False)
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
        """SIGKILL of the driver at a random protocol point of an upcoming batch.

        Disarmed as soon as that driver died: armed longer, every relaunched driver would die
        at the same point of the same batch (a crash loop, not one fault). A driver that
        decided the batch and still lives ``POINT_AFTER_DECISION_SECONDS`` later never
        reached the point (``not-reached``).
        """
        point = self.rng.choice(POINTS)
        pod = self._running_driver()
        kubelet, name = self._kubelet(pod), pod["metadata"]["name"]
        target = checks.last_batch(self.dsn) + 2
        self.arm({"point": point, "batch": target, "action": "kill"})
        try:
            deadline = time.monotonic() + SETTLE_SECONDS
            decided_at: float | None = None
            while time.monotonic() < deadline:
                if kubelet.returncode(NAMESPACE, name) is not None:
                    return point
                if checks.last_batch(self.dsn) >= target:
                    decided_at = decided_at or time.monotonic()
                    if time.monotonic() - decided_at > POINT_AFTER_DECISION_SECONDS:
                        break
                time.sleep(0.2)
        finally:
            self.disarm()
        return "not-reached"

    def executor_delete(self) -> str:
        """Delete one running executor pod of the driver through the API, one with a writer
        task open when there is one within ``BUSY_EXECUTOR_SECONDS`` (mid-batch), gracefully
        or forced at random. Spark runs the lost tasks again on the other executor and asks
        for a replacement pod; the batch commits once and the driver never restarts."""
        driver = self._running_driver()["metadata"]["name"]
        deadline = time.monotonic() + SETTLE_SECONDS
        while not (executors := self.executor_pods(driver)):
            if time.monotonic() > deadline:
                return "no-executor"
            time.sleep(0.5)
        busy: list[dict[str, Any]] = []
        started = refreshed = time.monotonic()
        while not busy and time.monotonic() < started + BUSY_EXECUTOR_SECONDS:
            if time.monotonic() > refreshed + 2:  # a replaced executor, now and then
                executors, refreshed = self.executor_pods(driver) or executors, time.monotonic()
            busy = [pod for pod in executors if self._task_open(pod)]
            time.sleep(0.05)
        victim = self.rng.choice(busy or executors)
        force = self.rng.random() < 0.5
        how = ("--grace-period=0", "--force") if force else ("--wait=false",)
        name = victim["metadata"]["name"]
        self.kubectl("delete", "pod", name, "-n", NAMESPACE, *how, check=False)
        return f"{'force-' if force else ''}deleted-{'mid-task' if busy else 'idle'}"

    def _task_open(self, pod: dict[str, Any]) -> bool:
        """Whether the executor's log has a task it started and has not finished (Spark's
        Executor logs both at INFO). Only the tail of the log is read, where open tasks are:
        polled many times a second, a whole log of a long run would cost a core."""
        meta = pod["metadata"]
        folder = f"{NAMESPACE}_{meta['name']}_{meta['uid']}"  # the process kubelet's layout
        try:
            with (self._kubelet(pod).root / folder / "container.log").open("rb") as log:
                log.seek(max(0, log.seek(0, 2) - 65536))
                tail = log.read().decode(errors="replace")
        except (LookupError, OSError):
            return False
        return bool(set(_STARTED.findall(tail)) - set(_FINISHED.findall(tail)))

    def node_partition(self) -> str:
        """Cut the driver's node off from the API server; its processes run on as zombies.

        kube-controller-manager marks the node Ready=Unknown after its monitor grace, and the
        operator, after its node-lost grace, must fence the driver, force-delete it and launch
        the next epoch on the other node. Once that driver has decided a batch (else a stall),
        the zombie gets ``ZOMBIE_FENCED_SECONDS`` to meet the fence and exit on its own, then
        the node is healed: its kubelet kills what the API deleted, and the node is Ready and
        untainted again before the next fault.
        """
        pod = self._running_driver()
        zombie, node = pod["metadata"]["name"], pod["spec"]["nodeName"]
        kubelet = self.cluster.kubelet_on(node)
        epoch = self.epoch_number()
        self._pause()
        kubelet.partition()
        try:
            deadline = time.monotonic() + SETTLE_SECONDS
            while self.highest_decided_epoch() <= epoch:
                if time.monotonic() > deadline:
                    self.stalls += 1
                    return "not-relaunched"
                time.sleep(0.5)
            deadline = time.monotonic() + ZOMBIE_FENCED_SECONDS
            while kubelet.returncode(NAMESPACE, zombie) is None and time.monotonic() < deadline:
                time.sleep(0.5)
            code = kubelet.returncode(NAMESPACE, zombie)
        finally:
            kubelet.heal()
            self._until_healthy(node)
        if code is None:
            return "zombie-killed-at-heal"
        return "zombie-fenced" if code == EXIT_FENCED else f"zombie-exited-{code}"

    def spec_edit(self) -> str:
        """A valid edit mid-run (``restartNonce``, as a person restarting on purpose would):
        the operator stops the driver at a batch boundary and launches the next epoch."""
        epoch = self.epoch_number()
        self._pause()
        nonce = self.rng.randrange(1, 1 << 30)
        patch = json.dumps({"spec": {"restartNonce": nonce}})
        self.kubectl("patch", "eop", NAME, "-n", NAMESPACE, "--type=merge", "-p", patch)
        deadline = time.monotonic() + SETTLE_SECONDS
        while self.highest_decided_epoch() <= epoch:
            if time.monotonic() > deadline:
                self.stalls += 1
                return "not-restarted"
            time.sleep(0.5)
        return "restarted"

    def spec_edit_invalid(self) -> str:
        """An edit the API server takes but eo refuses (a sink whose DSN is an env reference,
        which only a local run can resolve): the running driver keeps the last good spec and
        goes on deciding batches; the edit is then reverted."""
        pod = self._running_driver()
        epoch, before = self.epoch_number(), checks.last_batch(self.dsn)
        refused = {
            "name": "refused",
            "postgres": {"dsn": {"env": "NOT_ON_KUBERNETES"}, "table": "public.refused"},
        }
        add = json.dumps([{"op": "add", "path": "/spec/sinks/-", "value": refused}])
        self.kubectl("patch", "eop", NAME, "-n", NAMESPACE, "--type=json", "-p", add)
        try:
            deadline = time.monotonic() + SETTLE_SECONDS
            while checks.last_batch(self.dsn) <= before + 2:
                if time.monotonic() > deadline:
                    self.stalls += 1
                    return "stopped-deciding"
                time.sleep(0.5)
            same = self.driver_pod()
            kept = same is not None and same["metadata"]["name"] == pod["metadata"]["name"]
        finally:
            sinks = json.loads(
                self.kubectl("get", "eop", NAME, "-n", NAMESPACE, "-o", "json").stdout
            )["spec"]["sinks"]
            index = next(i for i, sink in enumerate(sinks) if sink["name"] == "refused")
            remove = json.dumps([{"op": "remove", "path": f"/spec/sinks/{index}"}])
            self.kubectl("patch", "eop", NAME, "-n", NAMESPACE, "--type=json", "-p", remove)
        return "kept-running" if kept and self.epoch_number() == epoch else "driver-replaced"

    def operator_restart(self) -> str:
        """The operator stopped gracefully and started again, as a rolling upgrade of its
        Deployment does (same version here): the driver keeps running, nothing restarts it."""
        pod = self._running_driver()
        epoch = self.epoch_number()
        self._pause()
        self.operator.stop(signal.SIGTERM)
        self.operator.start()
        self.operator_restarts += 1
        time.sleep(15)  # a few reconcile passes of the new process
        same = self.driver_pod()
        kept = same is not None and same["metadata"]["name"] == pod["metadata"]["name"]
        return "driver-kept" if kept and self.epoch_number() == epoch else "driver-restarted"

    def _until_healthy(self, node: str) -> None:
        """Until the healed node is Ready and untainted; else a stall (the run goes on: the
        audit at the end still says whether anything was lost or doubled)."""
        deadline = time.monotonic() + NODE_HEALTHY_SECONDS
        while time.monotonic() < deadline:
            doc = json.loads(self.kubectl("get", "node", node, "-o", "json").stdout)
            ready = [
                c["status"] for c in doc["status"].get("conditions", []) if c["type"] == "Ready"
            ]
            if ready == ["True"] and not doc["spec"].get("taints"):
                return
            time.sleep(0.5)
        self.stalls += 1

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
    "node-partition": OperatorChaos.node_partition,
    "executor-delete": OperatorChaos.executor_delete,
    "spec-edit": OperatorChaos.spec_edit,
    "spec-edit-invalid": OperatorChaos.spec_edit_invalid,
    "operator-restart": OperatorChaos.operator_restart,
}
EXECUTOR_KINDS = frozenset({"executor-delete"})
"""Kinds that need executor pods (``--executors`` > 0)."""
