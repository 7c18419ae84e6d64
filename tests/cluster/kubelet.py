"""The process kubelet: pods bound to the fake node run as local processes of this checkout.

What it does, as the real kubelet (plus a trivial scheduler) would:

* binds pending pods with no ``nodeName`` to its node (as ``system:kube-scheduler``) when its
  node is the first, by name, that a scheduler would consider: not cordoned, and no
  ``NoSchedule``/``NoExecute`` taint the pod does not tolerate (so a partitioned node, once
  the node lifecycle controller tainted it, gets no new pods),
* runs the first container's ``command`` + ``args`` (no command: the job image's entrypoint,
  as for Spark's executor pods, see ``podspec``) as a process in its own session, with the
  pod's env (see ``podenv``), working directory a per-pod temp folder, stdout and stderr in
  one per-pod log file (:meth:`ProcessKubelet.logs`); ``PATH`` starts with this venv's bin
  folder, so every image maps to the local installation (``eo``, ``python``),
* reports Pending -> Running (podIP 127.0.0.1, Ready) -> Succeeded/Failed with exit code,
  and, with ``terminationMessagePolicy: FallbackToLogsOnError``, the tail of a failed
  container's log as its termination message,
* keeps a pod Pending as the real kubelet does when its container cannot start yet: a missing
  Secret/ConfigMap (key) is ``CreateContainerConfigError``; an image from a registry that can
  never resolve (``*.invalid``, see ``images``) is ``ErrImagePull``, then ``ImagePullBackOff``,
* honours graceful deletion: SIGTERM to the process group, SIGKILL after
  ``deletionGracePeriodSeconds``, then the final delete,
* keeps the node Ready (``node``: Lease and status heartbeats, from a thread of their own so a
  slow pass never looks like a lost node). It acts with the node's own credentials, so the
  Node authorizer limits it as it limits a real kubelet.

What it does not: restarts (only ``restartPolicy: Never``), init or extra containers, probes,
volumes other than emptyDir, PVC (``podvolumes``), configMap and API access (``podapi``: the
pod's ServiceAccount token, so a Spark driver creates its executors with its own RBAC), resource
limits, ``kubectl logs/exec``.

Simulations for failure tests: :meth:`partition` / :meth:`heal` (a node cut off from the API
server: the control plane alone decides what the API says about it, as for a real one),
:meth:`freeze` / :meth:`thaw`, :meth:`kill`, :meth:`process_alive`.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from kubernetes.client import (
    ApiClient,
    ApiException,
    CoordinationV1Api,
    CoreV1Api,
    V1Binding,
    V1DeleteOptions,
    V1Node,
    V1ObjectMeta,
    V1ObjectReference,
    V1Pod,
    V1Preconditions,
    V1Taint,
)

from tests.cluster import podstatus
from tests.cluster.images import PullBackoff, pull_error
from tests.cluster.node import NodeAgent
from tests.cluster.podenv import EnvNotReadyError
from tests.cluster.podprocess import PodProcess, launch, termination_message
from tests.cluster.podspec import UnsupportedPodError
from tests.cluster.processes import kill_group
from tests.cluster.watch import watch_pods

log = logging.getLogger(__name__)

RESYNC_SECONDS = 1.0
HEARTBEAT_TICK_SECONDS = 0.5


@dataclass(frozen=True)
class KubeletCredentials:
    """Where the apiserver is and the tokens the kubelet acts with."""

    server: str
    ca_cert: Path
    node_token: str
    scheduler_token: str


class ProcessKubelet:
    """Runs in background threads of the test process; :meth:`stop` ends them and the pods."""

    def __init__(
        self,
        node_client: ApiClient,
        scheduler_client: ApiClient,
        node_name: str,
        root: Path,
        credentials: KubeletCredentials,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.node_name = node_name
        self.root = root
        self._core = CoreV1Api(node_client)
        self._scheduler = CoreV1Api(scheduler_client)
        self._node = NodeAgent(self._core, CoordinationV1Api(node_client), node_name)
        self._credentials = credentials
        self._extra_env = extra_env or {}
        self._pods: dict[str, PodProcess] = {}
        self._by_name: dict[tuple[str, str], PodProcess] = {}
        self._waiting: dict[str, str] = {}
        self._pulls: dict[str, PullBackoff] = {}
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._partitioned = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Post the node Ready, then start the heartbeats, the watches and the reconcile loop."""
        self._node.heartbeat(force=True)
        self._thread(self._heartbeats)
        creds = self._credentials
        for token, selector in (
            (creds.node_token, f"spec.nodeName={self.node_name}"),
            (creds.scheduler_token, "spec.nodeName="),
        ):
            self._thread(
                watch_pods,
                creds.server,
                token,
                creds.ca_cert,
                selector,
                self._wake.set,
                self._stopping,
            )
        self._thread(self._loop)

    def _thread(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(
            target=target, args=args, name=f"process-kubelet-{len(self._threads)}", daemon=True
        )
        self._threads.append(thread)
        thread.start()

    def stop(self) -> None:
        """Stop the threads and SIGKILL every process still running (zombies included)."""
        self._stopping.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout=10)
        with self._lock:
            for pod in self._pods.values():
                kill_group(pod.process.pid, signal.SIGKILL)
                pod.process.wait()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(RESYNC_SECONDS)
            self._wake.clear()
            if self._stopping.is_set():
                return
            try:
                with self._lock:
                    if not self._partitioned.is_set():
                        self.sync()
            except Exception:  # the loop must outlive API hiccups; the next pass retries
                log.exception("process kubelet sync failed")

    def _heartbeats(self) -> None:
        while not self._stopping.wait(HEARTBEAT_TICK_SECONDS):
            if self._partitioned.is_set():
                continue
            try:
                self._node.heartbeat()
            except Exception:  # a missed heartbeat is retried on the next tick
                log.exception("process kubelet heartbeat failed")

    # -- reconciliation -----------------------------------------------------------------

    def sync(self) -> None:
        """One pass: bind unscheduled pods, then bring every bound pod's process in line."""
        for pod in self._scheduler.list_pod_for_all_namespaces(
            field_selector="spec.nodeName="
        ).items:
            self._bind(pod)
        seen: set[str] = set()
        for pod in self._core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={self.node_name}"
        ).items:
            assert pod.metadata is not None and pod.metadata.uid is not None
            seen.add(pod.metadata.uid)
            try:
                self._sync_pod(pod, self._pods.get(pod.metadata.uid))
            except ApiException:  # one pod's failed update must not starve the others
                log.exception("syncing pod %s/%s", pod.metadata.namespace, pod.metadata.name)
        self._waiting = {uid: why for uid, why in self._waiting.items() if uid in seen}
        self._pulls = {uid: pulls for uid, pulls in self._pulls.items() if uid in seen}
        for uid in set(self._pods) - seen:  # deleted behind our back (e.g. force delete)
            gone = self._pods.pop(uid)
            kill_group(gone.process.pid, signal.SIGKILL)

    def _bind(self, pod: V1Pod) -> None:
        meta, spec, status = pod.metadata, pod.spec, pod.status
        assert meta is not None and spec is not None and meta.name and meta.namespace
        if meta.deletion_timestamp is not None or (status and status.phase != "Pending"):
            return
        if (spec.scheduler_name or "default-scheduler") != "default-scheduler":
            return
        if self._chosen_node(pod) != self.node_name:
            return
        binding = V1Binding(
            metadata=V1ObjectMeta(name=meta.name, uid=meta.uid),
            target=V1ObjectReference(kind="Node", name=self.node_name),
        )
        try:
            self._scheduler.create_namespaced_pod_binding(
                meta.name, meta.namespace, binding, _preload_content=False
            )
        except ApiException as error:
            if error.status not in (404, 409):
                raise

    def _chosen_node(self, pod: V1Pod) -> str | None:
        """The node the scheduler's filters leave first (by name), or None when none fits."""
        nodes = self._scheduler.list_node().items
        fits = [
            node.metadata.name
            for node in nodes
            if node.metadata is not None and node.metadata.name and _schedulable(node, pod)
        ]
        return min(fits, default=None)

    def _sync_pod(self, pod: V1Pod, tracked: PodProcess | None) -> None:
        assert pod.metadata is not None and pod.status is not None
        if pod.metadata.deletion_timestamp is not None:
            self._terminate(pod, tracked)
        elif tracked is not None:
            self._report(pod, tracked)
        elif pod.status.phase == "Pending":
            self._start(pod)
        elif pod.status.phase == "Running":
            message = "the process kubelet restarted and lost this process"
            self._fail(pod, "ProcessLost", message, code=137)

    def _report(self, pod: V1Pod, tracked: PodProcess) -> None:
        returncode = tracked.process.poll()
        now = datetime.now(UTC)
        if returncode is None:
            if tracked.reported != "running":
                self._patch_status(
                    pod, podstatus.running(pod, now, tracked.started, tracked.process.pid)
                )
                tracked.reported = "running"
            return
        if tracked.reported != "terminated":
            kill_group(tracked.process.pid, signal.SIGKILL)  # a container dies with its PID 1
            tracked.finished = tracked.finished or now
            end = podstatus.Exit.from_returncode(returncode)
            message = termination_message(pod, tracked, end.code)
            self._patch_status(
                pod,
                podstatus.terminated(
                    pod, now, tracked.started, tracked.finished, end, termination_message=message
                ),
            )
            tracked.reported = "terminated"

    def _start(self, pod: V1Pod) -> None:
        meta = pod.metadata
        assert meta is not None and meta.uid is not None and meta.name and meta.namespace
        if not self._pulled(pod, meta.uid):
            return
        try:
            tracked = launch(pod, self._core, self.root, self._extra_env, self._credentials.server)
        except UnsupportedPodError as problem:
            self._fail(pod, problem.reason, problem.message)
            return
        except EnvNotReadyError as problem:
            self._wait(pod, "CreateContainerConfigError", str(problem))
            return
        self._pods[meta.uid] = self._by_name[meta.namespace, meta.name] = tracked
        self._waiting.pop(meta.uid, None)
        threading.Thread(target=self._await_exit, args=(tracked.process,), daemon=True).start()
        self._report(pod, tracked)

    def _pulled(self, pod: V1Pod, uid: str) -> bool:
        """Pull the first container's image (see ``images``); False while the pod must wait."""
        assert pod.spec is not None
        image = pod.spec.containers[0].image or ""
        pulls = self._pulls.setdefault(uid, PullBackoff())
        now = time.monotonic()
        if now < pulls.retry_at:
            self._wait(pod, "ImagePullBackOff", f'Back-off pulling image "{image}"')
            return False
        error = pull_error(image)
        if error is None:
            return True
        pulls.failed(now)
        self._wait(pod, "ErrImagePull", error)
        return False

    def _wait(self, pod: V1Pod, reason: str, message: str) -> None:
        """Report the first container waiting, when its reason or message changed."""
        assert pod.metadata is not None and pod.metadata.uid is not None
        if self._waiting.get(pod.metadata.uid) != f"{reason}: {message}":
            now = datetime.now(UTC)
            self._patch_status(pod, podstatus.waiting(pod, now, reason, message))
            self._waiting[pod.metadata.uid] = f"{reason}: {message}"

    def _fail(self, pod: V1Pod, reason: str, message: str, code: int = 128) -> None:
        now = datetime.now(UTC)
        end = podstatus.Exit(code, reason, message)
        self._patch_status(pod, podstatus.terminated(pod, now, None, now, end))

    def _await_exit(self, process: subprocess.Popen[bytes]) -> None:
        process.wait()
        self._wake.set()

    def _terminate(self, pod: V1Pod, tracked: PodProcess | None) -> None:
        meta = pod.metadata
        assert meta is not None and meta.name is not None and meta.namespace is not None
        if tracked is not None and tracked.process.poll() is None:
            if tracked.term_deadline is None:
                grace = meta.deletion_grace_period_seconds or 0
                tracked.term_deadline = time.monotonic() + grace
                kill_group(tracked.process.pid, signal.SIGTERM if grace else signal.SIGKILL)
            elif time.monotonic() >= tracked.term_deadline:
                kill_group(tracked.process.pid, signal.SIGKILL)
            return
        if tracked is not None:
            self._report(pod, tracked)
            self._pods.pop(tracked.uid, None)
        try:
            # With a body the apiserver ignores query parameters: the grace goes in the body.
            self._core.delete_namespaced_pod(
                meta.name,
                meta.namespace,
                body=V1DeleteOptions(
                    grace_period_seconds=0, preconditions=V1Preconditions(uid=meta.uid)
                ),
            )
        except ApiException as error:
            if error.status not in (404, 409):
                raise

    def _patch_status(self, pod: V1Pod, status: podstatus.Status) -> None:
        assert pod.metadata is not None and pod.metadata.name and pod.metadata.namespace
        self._core.patch_namespaced_pod_status(
            pod.metadata.name,
            pod.metadata.namespace,
            {"status": status},
            _content_type="application/strategic-merge-patch+json",
        )

    # -- what tests read and break ------------------------------------------------------

    def _find(self, namespace: str, name: str) -> PodProcess:
        try:
            return self._by_name[namespace, name]
        except KeyError:
            raise KeyError(f"the process kubelet never started pod {namespace}/{name}") from None

    def logs(self, namespace: str, name: str) -> str:
        """Everything the pod's process wrote to stdout and stderr so far."""
        return self._find(namespace, name).log_path.read_text(errors="replace")

    def process_alive(self, namespace: str, name: str) -> bool:
        """True while the pod's main process has not exited (frozen counts as alive)."""
        return self._find(namespace, name).process.poll() is None

    def returncode(self, namespace: str, name: str) -> int | None:
        """The pod's main process's exit code (``Popen.returncode``), None while it runs."""
        return self._find(namespace, name).process.poll()

    def pid(self, namespace: str, name: str) -> int:
        """The pod's main process id (also its process group id)."""
        return self._find(namespace, name).process.pid

    def kill(self, namespace: str, name: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the pod's whole process group, as a crash or OOM kill would."""
        kill_group(self._find(namespace, name).process.pid, sig)

    def freeze(self, namespace: str, name: str) -> None:
        """SIGSTOP the pod's process group: it stays 'running' but does nothing."""
        self.kill(namespace, name, signal.SIGSTOP)

    def thaw(self, namespace: str, name: str) -> None:
        """SIGCONT a frozen pod's process group."""
        self.kill(namespace, name, signal.SIGCONT)

    def detach(self, namespace: str, name: str) -> PodProcess:
        """Forget a pod's process without stopping it: it survives on a partitioned node.

        Whatever the API later says about the pod no longer reaches the process, which keeps
        running (and writing) as a zombie; the caller owns it from here and must end it.
        """
        with self._lock:
            tracked = self._find(namespace, name)
            self._pods.pop(tracked.uid, None)
            return tracked

    def partition(self) -> None:
        """Cut the node off from the API server: no heartbeats, no status, no syncing.

        Nothing is written for it: the node lifecycle controller notices the Lease is not
        renewed (``NODE_MONITOR_GRACE_SECONDS``), marks the node Ready=Unknown and its pods
        Ready=False, and taints it. The processes keep running (zombies that may still write
        to anything but the API server), and nothing the API asks (deletions included) reaches
        them until :meth:`heal`.
        """
        self._partitioned.set()

    def heal(self) -> None:
        """Reconnect: heartbeats resume, surviving pods report again, deleted ones die."""
        with self._lock:
            self._partitioned.clear()
            for tracked in self._pods.values():
                tracked.reported = ""
            self._node.heartbeat(force=True)
        self._wake.set()


def _schedulable(node: V1Node, pod: V1Pod) -> bool:
    """Not cordoned, and every NoSchedule/NoExecute taint tolerated (the scheduler's filters
    that matter here; resources and affinities are not checked)."""
    if node.spec is not None and node.spec.unschedulable:
        return False
    taints = (node.spec.taints if node.spec else None) or []
    return all(
        _tolerated(taint, pod) for taint in taints if taint.effect in ("NoSchedule", "NoExecute")
    )


def _tolerated(taint: V1Taint, pod: V1Pod) -> bool:
    for toleration in (pod.spec.tolerations if pod.spec else None) or []:
        if toleration.effect and toleration.effect != taint.effect:
            continue
        if toleration.operator == "Exists":
            if not toleration.key or toleration.key == taint.key:
                return True
        elif toleration.key == taint.key and (toleration.value or "") == (taint.value or ""):
            return True
    return False
