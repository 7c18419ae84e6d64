"""Observe -> plan -> act for one pipeline, with status recorded before acting.

Observation turns the API objects into planner input; acting performs the planner's actions
through ``kube`` and the protocol's recovery, in order: the epoch is reserved on the object
(guarded by resourceVersion) before the fence is raised, and the fence is raised before any
prepared transaction is resolved or any driver launched.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

import yaml
from kubernetes.client.exceptions import ApiException

from eo_jobs.protocol.control_api import LifecycleRecord
from eo_jobs.protocol.errors import EXIT_FENCED, FenceRegressionError
from eo_jobs.spec import SpecError, parse_pipeline
from eo_jobs.spec.checks import credential_refs, executor_input_problem
from eo_jobs.spec.models import Pipeline
from eo_jobs.spec.pod_template import ASSIGNED_UID_ENV
from eo_operator import lifecycle
from eo_operator.auditing import ContinuousAudit
from eo_operator.blockers import FENCE, SINK, classify, safe_message
from eo_operator.deletion import clean_up_sinks
from eo_operator.disruption import disruption
from eo_operator.fence_owner import ADOPT_ANNOTATION, adoption, fence_owner
from eo_operator.kube import Conflict, Kube
from eo_operator.legacy_hash import legacy_spec_hashes
from eo_operator.metrics import PipelineHealth, PipelineMetrics, PipelinePass
from eo_operator.planner import (
    HUNG,
    NODE_LOST_GRACE_SECONDS,
    START_OVER_REFUSED,
    Action,
    Blocked,
    DriverPod,
    Kind,
    LastGood,
    Memory,
    Observation,
    Phase,
    Plan,
    Stable,
    plan,
)
from eo_operator.progress import Watch, read_driver_progress, watch
from eo_operator.resources import (
    ANNOTATION_GENERATION,
    LABEL_EPOCH,
    LABEL_SPEC_HASH,
    SPEC_KEY,
    driver_pod,
    driver_service,
    job_image,
    spec_configmap,
    spec_configmap_name,
    spec_hash,
    stable_configmap_name,
)
from eo_operator.sinks import Health, PipelineSinks, dsns_from_secrets
from eo_operator.status import conditions, memory_from_status, status_from
from eo_operator.tally import BatchTally, Fresh

log = logging.getLogger("eo.operator")

NODE_LIST_SECONDS = 10.0
"""How long one list of the nodes serves the disruption guard of every pass."""
FAULT_ENV = "EO_OPERATOR_FAULT"
"""Test hook: the operator SIGKILLs itself at a named point: ``after-fence`` (between fence and
launch), ``after-launch`` (right after the driver pod was created)."""


def env_seconds(name: str, default: float, minimum: float, value: str) -> float:
    """A number of seconds from the operator's environment, or a ``ValueError`` naming the
    variable and the chart value that sets it: a typo must stop the operator at start with one
    line, not as a float() traceback, nor pass as a busy loop (0 s between passes)."""
    text = os.environ.get(name)
    if not text:
        return default
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds >= minimum:  # also false for NaN
        raise ValueError(
            f"{name}={text!r} is not a number of seconds >= {minimum:g}; set the chart value "
            f"operator.{value} (default {default:g})"
        )
    return seconds


@dataclass
class Settings:
    """Operator-wide settings (from the environment the chart sets)."""

    job_image: str = field(default_factory=lambda: os.environ.get("EO_JOB_IMAGE", "eo-job:latest"))
    driver_service_account: str | None = field(
        default_factory=lambda: os.environ.get("EO_DRIVER_SERVICE_ACCOUNT") or None
    )
    health_interval: float = 10.0
    delete_sink_timeout: float = field(
        default_factory=lambda: env_seconds(
            "EO_DELETE_SINK_TIMEOUT_SECONDS", 300, 0, "deleteSinkTimeoutSeconds"
        )
    )
    """How long a deletion retries an unreachable sink before it lets go with a Warning."""
    node_lost_grace_seconds: int = field(
        default_factory=lambda: int(
            env_seconds(
                "EO_NODE_LOST_GRACE_SECONDS", NODE_LOST_GRACE_SECONDS, 0, "nodeLostGraceSeconds"
            )
        )
    )
    """How long a driver's node may be not Ready (partitioned, dead, kubelet down) before the
    driver is fenced, force-deleted and relaunched elsewhere; also the ``tolerationSeconds``
    of the driver pods' ``unreachable``/``not-ready`` tolerations."""
    platform_assigns_uid: bool = field(
        default_factory=lambda: os.environ.get(ASSIGNED_UID_ENV, "").lower() == "true"
    )
    """OpenShift-like platforms assign each pod's UID, GID and fsGroup (the chart's
    ``openshift: true``): driver and executor pods then name none."""
    max_requeue: float = field(
        default_factory=lambda: env_seconds("EO_MAX_REQUEUE_SECONDS", 20, 1, "maxRequeueSeconds")
    )
    """The longest wait between two passes of one pipeline (the planner asks for 30 s when
    suspended or failed): the operator's view of every pipeline (status, metrics) is at most
    this old, which is the status-freshness figure of bench/operator_scale.py. Spec edits and
    driver pod changes wake a pipeline's loop at once whatever this is."""
    idle_health_interval: float = field(
        default_factory=lambda: env_seconds(
            "EO_IDLE_HEALTH_INTERVAL_SECONDS", 120, 0, "idleHealthIntervalSeconds"
        )
    )
    """``health_interval`` for an idle pipeline: suspended or failed, no driver pod, nothing in
    doubt at its last health pass. Nothing writes to its sinks, and its sweep finds nothing,
    so the sink queries of 1,000 idle pipelines stay small; it still runs, for a zombie on a
    lost node (force-deleted, so no pod left) whose late prepare must be swept."""
    audit_interval: float = field(
        default_factory=lambda: env_seconds(
            "EO_AUDIT_INTERVAL_SECONDS", 300, 10, "auditIntervalSeconds"
        )
    )
    """Seconds between two audit passes of a running pipeline whose ``spec.audit`` names no
    interval of its own."""


def parse(obj: dict[str, Any]) -> tuple[Pipeline | None, str | None]:
    """The pipeline, or the reason it is invalid (schema and operator-side checks)."""
    try:
        pipeline = parse_pipeline(
            {k: obj[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in obj}
        )
    except SpecError as exc:
        return None, "; ".join(str(p) for p in exc.problems)
    for path, ref in credential_refs(pipeline.spec):
        if ref.secret_key_ref is None:
            return None, (
                f"{path}: on Kubernetes use secretKeyRef {{name, key}}; env references only "
                "work for local runs"
            )
    problem = executor_input_problem(pipeline.spec)
    if problem is not None:
        return None, str(problem)
    return pipeline, None


@dataclass(frozen=True)
class DriverPods:
    """The driver pods of a pipeline, sorted out."""

    driver: DriverPod | None
    """The newest-epoch pod."""
    stale: list[str]
    """Older pods to delete: zombies of past launches, fenced ones."""
    failed: tuple[DriverPod, ...]
    """Older pods that failed: kept for their logs (the planner prunes them)."""


def observe_driver(pods: list[dict[str, Any]]) -> DriverPods:
    """The newest-epoch driver pod, older failed ones (kept) and the other older ones."""
    parsed = sorted((_driver_pod(pod) for pod in pods), key=lambda p: p.epoch, reverse=True)
    if not parsed:
        return DriverPods(None, [], ())
    older = parsed[1:]
    failed = tuple(
        p for p in older if p.terminated and p.exit_code != EXIT_FENCED and p.deleting_since is None
    )
    return DriverPods(parsed[0], [p.name for p in older if p not in failed], failed)


def _driver_pod(pod: dict[str, Any]) -> DriverPod:
    meta, status = pod["metadata"], pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    driver = next((c for c in containers if c.get("name") == "driver"), None)
    state = (driver or (containers[0] if containers else {})).get("state") or {}
    terminated = state.get("terminated")
    if terminated is not None:
        reason, message = terminated.get("reason"), terminated.get("message")
    else:
        reason, message = _waiting(status, state)
    deleting = meta.get("deletionTimestamp")
    labels = meta.get("labels") or {}
    generation = (meta.get("annotations") or {}).get(ANNOTATION_GENERATION, "")
    return DriverPod(
        name=meta["name"],
        epoch=int(labels.get(LABEL_EPOCH, "0")),
        phase=status.get("phase") or "Pending",
        spec_hash=labels.get(LABEL_SPEC_HASH, ""),
        exit_code=terminated.get("exitCode") if terminated is not None else None,
        deleting_since=_time(deleting) if deleting else None,
        grace_seconds=int(meta.get("deletionGracePeriodSeconds") or 60),
        created_at=_opt_time(meta.get("creationTimestamp")),
        reason=reason or status.get("reason") or "",
        message=message or status.get("message") or "",
        node=(pod.get("spec") or {}).get("nodeName") or "",
        generation=int(generation) if generation.isdigit() else None,
    )


def suspect_node(pod: dict[str, Any]) -> str | None:
    """The node to look at for a driver pod that should run but is not Ready, else None.

    When a node stops reporting, the node lifecycle controller marks its pods Ready=False (the
    pod's phase stays Running: the kubelet that would change it is the one that is away), so a
    pod that is Ready costs no node read; one that is not (Pending, or Running and marked) is
    checked against its node's own Ready condition.
    """
    status = pod.get("status") or {}
    node = (pod.get("spec") or {}).get("nodeName")
    if not node or status.get("phase") in ("Succeeded", "Failed"):
        return None
    ready = _condition(status, "Ready")
    return None if ready is not None and ready.get("status") == "True" else str(node)


def node_problem(pod: dict[str, Any], node: dict[str, Any] | None) -> tuple[str, datetime | None]:
    """What is wrong with the pod's node and since when; ``("", None)`` for a Ready node.

    The time is the node's Ready transition (when the lifecycle controller, or the kubelet,
    said it stopped being Ready); for a node object that is gone, the pod's own Ready
    transition, if any.
    """
    if node is None:
        ready = _condition(pod.get("status") or {}, "Ready")
        return "gone", _opt_time((ready or {}).get("lastTransitionTime"))
    ready = _condition(node.get("status") or {}, "Ready")
    if ready is None or ready.get("status") == "True":
        return "", None
    why = ": ".join(str(ready[k]) for k in ("reason", "message") if ready.get(k))
    problem = f"Ready={ready.get('status')}" + (f" ({why})" if why else "")
    return problem, _opt_time(ready.get("lastTransitionTime"))


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), None)


def _waiting(status: dict[str, Any], state: dict[str, Any]) -> tuple[str | None, str | None]:
    """Why a pod that has not exited is not running: its driver container's waiting state, an
    init container's (while the driver waits in PodInitializing), or the scheduler's verdict."""
    waiting = state.get("waiting") or {}
    if waiting.get("reason") not in (None, "PodInitializing"):
        return waiting.get("reason"), waiting.get("message")
    for init in status.get("initContainerStatuses") or []:
        blocked = (init.get("state") or {}).get("waiting") or {}
        if blocked.get("reason") not in (None, "PodInitializing"):
            return blocked.get("reason"), blocked.get("message")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return condition.get("reason"), condition.get("message")
    return waiting.get("reason"), waiting.get("message")


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _opt_time(text: str | None) -> datetime | None:
    return _time(text) if text else None


class Reconciler:
    """Reconciles one pipeline at a time; holds per-pipeline health bookkeeping."""

    def __init__(self, kube: Kube, metrics: PipelineMetrics, settings: Settings) -> None:
        self.kube = kube
        self.metrics = metrics
        self.settings = settings
        self._health_at: dict[tuple[str, str], float] = {}
        self._tallies: dict[tuple[str, str], BatchTally] = {}
        self._blocked: dict[tuple[str, str], Blocked] = {}
        self._nodes_forbidden = False
        self._node_list: tuple[float, list[dict[str, Any]]] | None = None
        self._node_list_forbidden = False
        self._in_doubt: dict[tuple[str, str], int] = {}
        """In-doubt transactions each pipeline had at its last health pass."""
        self._watches: dict[tuple[str, str], Watch] = {}
        """What this process saw of each pipeline's driver endpoint (``progress.Watch``)."""
        self._commits: dict[tuple[str, str], datetime] = {}
        """Each pipeline's last decided batch, as its last health pass read it."""
        self._decided: dict[tuple[str, str], int] = {}
        """The epoch of each pipeline's last decided batch, as its last health pass read it
        (``Observation.decided_epoch``: which driver is stable)."""
        self.audits = ContinuousAudit(kube, metrics.audit, settings.audit_interval)

    def reconcile(self, namespace: str, name: str) -> float:
        """One pass; returns seconds until the next one.

        Every write of the pass is guarded by the resourceVersion of the observation (each
        write returns the version the next one is guarded by): when anyone else changed the
        object in between, the pass stops at that write and the next one plans again.
        """
        try:
            return self._reconcile(namespace, name)
        except Conflict:
            raise RetrySoon(f"{namespace}/{name} changed since it was observed") from None

    def _reconcile(self, namespace: str, name: str) -> float:
        return min(self._pass(namespace, name), self.settings.max_requeue)

    def _pass(self, namespace: str, name: str) -> float:
        obj = self.kube.get_pipeline(namespace, name)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return 5.0
        pipeline, error = parse(obj)
        pods = self.kube.driver_pods(namespace, name)
        observed = observe_driver(pods)
        driver = self._with_node(observed.driver, pods)
        for pod_name in observed.stale:
            self.kube.delete_pod(namespace, pod_name)
        annotations = obj["metadata"].get("annotations") or {}
        raw_epoch = annotations.get("eo.dev/epoch", "")
        current, legacy = "", frozenset[str]()
        last_good: LastGood | None = None
        runs = pipeline  # what recovery, launch and health use: the spec, or the last good one
        memory = self._with_blocker(namespace, name, memory_from_status(obj.get("status") or {}))
        held: tuple[Pipeline, LastGood] | None = None
        if pipeline is not None:
            current = spec_hash(pipeline, job_image(pipeline, self.settings.job_image))
            legacy = legacy_spec_hashes(pipeline)
            held = self._stable_spec(obj, pipeline, current, memory)
        else:
            # Refused: the spec a driver was last launched with stands in (planner rule 1).
            found = self._last_good(obj)
            if found is not None:
                runs, last_good = found
        generation = int(obj["metadata"].get("generation", 1))
        observation = Observation(
            now=datetime.now(UTC),
            generation=generation,
            spec=pipeline.spec if pipeline else None,
            spec_error=error,
            spec_hash=current,
            legacy_spec_hashes=legacy,
            annotation_epoch=int(raw_epoch) if raw_epoch.isdigit() else None,
            memory=memory,
            driver=driver,
            failed=observed.failed,
            node_lost_grace=timedelta(seconds=self.settings.node_lost_grace_seconds),
            node_disruption=self._disruption(driver),
            progress=self._progress((namespace, name), driver),
            decided_epoch=self._decided.get((namespace, name)),
            last_good=last_good,
            stable_spec=None if held is None else held[1],
        )
        result = plan(observation)
        rolled = result.memory.rolled_back
        if held is not None and rolled is not None and rolled.from_generation == generation:
            runs = held[0]  # rolled back: the last stable spec is recovered, launched, checked
        stable = result.memory.last_stable
        if stable is not None and stable != memory.last_stable:
            self._keep_stable(obj, runs, stable)
        driver_ip = self._observe_pass(obj, result, driver, pods)
        status = status_from(result.memory, observation, obj.get("status") or {})
        if result.actions or not _unchanged(obj, status):
            # Status first, guarded by the observation's resourceVersion; the patch returns
            # the object with its new resourceVersion, which guards the epoch reservation. A
            # pass that acts always writes first (so it acts only on an observation nobody
            # changed since); a pass that neither acts nor changes anything writes nothing:
            # at 1,000 pipelines, unconditional patches were most of the API and etcd load.
            patched = self.kube.patch_status(obj, status)
            if patched is None or patched["metadata"].get("deletionTimestamp"):
                # Deleted since it was read: the finalizer owns it now, and a driver launched
                # here would run beside (or after) the finalizer's fence.
                return 5.0
            obj = patched
        if runs is not None:
            acted = self._act_or_block(obj, runs, result, observation)
            if acted is None:
                return result.requeue_seconds
            self._health(acted, runs, result.memory, driver, driver_ip)
        else:
            for action in result.actions:
                self._simple(obj, action)
        return result.requeue_seconds

    def _progress(self, key: tuple[str, str], driver: DriverPod | None) -> datetime | None:
        """``Observation.progress``: None unless the driver's endpoint answered this process."""
        seen = self._watches.get(key)
        if driver is None or seen is None or seen.pod != driver.name:
            return None
        heard = datetime.fromtimestamp(seen.newest, UTC)
        commit = self._commits.get(key)
        return heard if commit is None else max(heard, commit)

    def _disruption(self, driver: DriverPod | None) -> str:
        """The disruption guard's verdict (``disruption``), read only for a driver whose node
        has a problem; the node list is shared by every pass for ``NODE_LIST_SECONDS``, so a
        disruption over 1,000 pipelines costs one list, not 1,000."""
        if driver is None or not driver.node_problem or self._node_list_forbidden:
            return ""
        now = time.monotonic()
        if self._node_list is None or now - self._node_list[0] > NODE_LIST_SECONDS:
            try:
                self._node_list = (now, self.kube.list_nodes())
            except ApiException as exc:
                if exc.status != 403:
                    raise
                log.warning(
                    "may not list nodes (HTTP 403): without the disruption guard a cluster-wide "
                    "NotReady replaces every driver; grant `list` on nodes (the chart does)"
                )
                self._node_list_forbidden = True
                return ""
        return disruption(self._node_list[1], driver.node)

    def _with_node(self, driver: DriverPod | None, pods: list[dict[str, Any]]) -> DriverPod | None:
        """The driver with its node's problem, read only when the pod is not Ready."""
        pod = next((p for p in pods if driver and p["metadata"]["name"] == driver.name), None)
        node_name = suspect_node(pod) if pod is not None else None
        if driver is None or pod is None or node_name is None:
            return driver
        try:
            node = self.kube.get_node(node_name)
        except ApiException as exc:
            if exc.status != 403:
                raise
            if not self._nodes_forbidden:
                log.warning(
                    "may not read nodes (HTTP 403): a driver on a lost node is only replaced "
                    "once its deletion is stuck; grant `get` on nodes (the chart does)"
                )
                self._nodes_forbidden = True
            return driver
        problem, since = node_problem(pod, node)
        return replace(driver, node_problem=problem, node_problem_since=since)

    def _observe_pass(
        self,
        obj: dict[str, Any],
        result: Plan,
        driver: DriverPod | None,
        pods: list[dict[str, Any]],
    ) -> str | None:
        """Metrics every pass knows without the sink; returns the running driver's pod IP."""
        meta = obj["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        memory = result.memory
        starts = [t for t in (memory.last_launch, _opt_time(meta.get("creationTimestamp"))) if t]
        self.metrics.observe_pass(
            namespace,
            name,
            PipelinePass(
                phase=memory.phase.value,
                driver_up=driver is not None and driver.phase == "Running",
                restarts=memory.restarts,
                epoch=memory.epoch or 0,
                active_since=max(starts).timestamp() if starts else None,
            ),
        )
        if driver is not None and any(
            a.kind is Kind.EVENT and a.reason == "DriverFenced" for a in result.actions
        ):
            self.metrics.record_fenced(namespace, name, driver.name)
        if driver is not None and any(
            a.kind is Kind.EVENT and a.reason == "StartTimeout" for a in result.actions
        ):
            self.metrics.record_start_timeout(namespace, name, driver.name)
        if driver is not None and any(
            a.kind is Kind.EVENT and a.reason == HUNG for a in result.actions
        ):
            self.metrics.record_hung(namespace, name, driver.name)
        if driver is None or driver.phase != "Running":
            return None
        for pod in pods:
            if pod["metadata"]["name"] == driver.name:
                ip = (pod.get("status") or {}).get("podIP")
                return str(ip) if ip else None
        return None

    def _with_blocker(self, namespace: str, name: str, memory: Memory) -> Memory:
        """Planner memory with the blocker this process met on its last pass, if any."""
        blocked = self._blocked.get((namespace, name))
        return memory if blocked is None else replace(memory, blocked=blocked)

    def _act_or_block(
        self, obj: dict[str, Any], pipeline: Pipeline, result: Plan, obs: Observation
    ) -> dict[str, Any] | None:
        """Act; an environment the operator cannot start the pipeline in (a Secret, the
        database, the driver's ServiceAccount) is recorded instead of raised: a Warning event
        with the fix when the blocker is new, and the planner's memory for the next pass, which
        puts it in a condition and, past the start timeout, in the Failed phase. None then."""
        key = (pipeline.metadata.namespace, pipeline.metadata.name)
        try:
            acted = self._act(obj, pipeline, result, obs)
        except Exception as exc:
            blocker = classify(exc, key[0])
            if blocker is None:
                raise
            before = self._blocked.get(key) or obs.memory.blocked
            self._blocked[key] = Blocked(
                blocker.condition,
                blocker.reason,
                blocker.message,
                before.since if before is not None else datetime.now(UTC),
            )
            if before is None or before.reason != blocker.reason:
                self.kube.event(obj, blocker.reason, blocker.text, warning=True)
                log.warning("%s: %s", pipeline.key, blocker.text)
            return None
        self._blocked.pop(key, None)
        return acted

    def _simple(self, obj: dict[str, Any], action: Action) -> None:
        namespace = obj["metadata"]["namespace"]
        if action.kind is Kind.EVENT:
            self.kube.event(obj, action.reason, action.message, action.warning)
        elif action.kind is Kind.DELETE_POD and action.pod:
            self.kube.delete_pod(namespace, action.pod)
        elif action.kind is Kind.FORCE_DELETE_POD and action.pod:
            self.kube.delete_pod(namespace, action.pod, grace_seconds=0)

    def _act(
        self, obj: dict[str, Any], pipeline: Pipeline, result: Plan, obs: Observation
    ) -> dict[str, Any]:
        for action in result.actions:
            if action.kind is Kind.RECOVER:
                assert action.epoch is not None
                obj = self._recover(obj, pipeline, action.epoch, obs)
            elif action.kind is Kind.LAUNCH:
                assert action.epoch is not None
                if obj["metadata"].get("deletionTimestamp"):
                    log.info("%s: being deleted; not launching", pipeline.key)
                    break
                obj = self._launch(obj, pipeline, action.epoch, *_standing_in(result, obs))
            else:
                self._simple(obj, action)
        return obj

    def _recover(
        self, obj: dict[str, Any], pipeline: Pipeline, epoch: int, obs: Observation
    ) -> dict[str, Any]:
        namespace, name = pipeline.metadata.namespace, pipeline.metadata.name
        started = time.monotonic()
        sinks = PipelineSinks(pipeline, dsns_from_secrets(self.kube, pipeline), self.kube)
        owner = fence_owner(obj)
        adopt_from: str | None = None
        try:
            fence = sinks.bound.control
            fence.ensure_schema()
            row = fence.fence(sinks.bound.pipeline)
            current = None if row is None else row.epoch
            # What the event reports: the resolution below finds the fence already raised.
            fence_from = "none" if current is None else str(current)
            # Another writer's fence is refused here, before an epoch is reserved for nothing.
            adopt_from = adoption(obj, sinks.bound.pipeline, epoch, row)
            if row is not None and (
                row.epoch > epoch or (row.epoch == epoch and row.owner != owner)
            ):
                # Equal is ours only if this object claimed it: another writer (or an older
                # eo, or `eo recover` by hand) may run a driver with that very epoch.
                self._jump_above_fence(obj, pipeline, epoch, row.epoch, row.owner)
            if (obs.annotation_epoch or 0) < epoch:
                try:
                    obj = self.kube.reserve_epoch(obj, epoch)
                except Conflict:
                    raise RetrySoon(
                        f"{namespace}/{name} changed while reserving epoch {epoch}"
                    ) from None
            fence.raise_fence(sinks.bound.pipeline, epoch, owner, adopt_from=adopt_from)
            if os.environ.get(FAULT_ENV) == "after-fence":
                os.kill(os.getpid(), signal.SIGKILL)
            report = sinks.recover(epoch, owner)
        except FenceRegressionError as exc:
            # The fence moved above the epoch after it was read (a manual `eo recover` or
            # `eo run --epoch N` in between), or another writer holds it at this epoch: plan
            # again above it, never loop on the error.
            self._jump_above_fence(obj, pipeline, epoch, exc.current, None)
        finally:
            sinks.close()
        if adopt_from is not None:
            obj = self._adopted(obj, pipeline, epoch, adopt_from)
        seconds = time.monotonic() - started
        self.metrics.record_recovery(namespace, name, seconds)
        self.metrics.record_resolution(
            namespace, name, committed=len(report.committed), rolled_back=len(report.rolled_back)
        )
        message = (
            f"fenced to epoch {epoch} (was {fence_from}); in-doubt transactions: "
            f"{len(report.committed)} committed, {len(report.rolled_back)} rolled back, "
            f"{report.left} left"
        )
        obj = (
            self.kube.patch_status(
                obj, {"recoveredEpoch": epoch, "conditions": _sink_answered(obj)}
            )
            or obj
        )
        self.kube.event(obj, "Recovered", message)
        log.info("%s/%s: %s", namespace, name, message)
        return obj

    def _jump_above_fence(
        self, obj: dict[str, Any], pipeline: Pipeline, epoch: int, fence: int, owner: str | None
    ) -> NoReturn:
        """Reserve an epoch above a sink fence that is ahead of the plan, then re-plan.

        The fence can be ahead after the pipeline was deleted and re-created under the same
        name (the finalizer fenced it), after a manual ``eo recover --epoch N``, or after a hand
        -over from another writer. Raising the fence to the planned epoch would be refused
        forever (or, at an equal fence this object did not claim, share an epoch with another
        writer's driver); the epoch above it is reserved on the object (guarded), so the next
        pass plans with it.
        """
        higher = fence + 1
        try:
            obj = self.kube.reserve_epoch(obj, higher)
        except Conflict:
            raise RetrySoon(f"{pipeline.key} changed while reserving epoch {higher}") from None
        by = "" if owner is None else f", owned by {owner}"
        message = (
            f"the sink fence of {pipeline.key} is at epoch {fence}{by}, not below the planned "
            f"epoch {epoch} (the pipeline was re-created or restored, `eo recover --epoch` ran "
            f"by hand, or the fence was handed over); reserved epoch {higher}"
        )
        self.kube.event(obj, "FenceAhead", message, warning=True)
        log.warning("%s", message)
        raise RetrySoon(message)

    def _adopted(
        self, obj: dict[str, Any], pipeline: Pipeline, epoch: int, previous: str
    ) -> dict[str, Any]:
        """The fence was handed over: say so, and remove the annotation, so that it cannot take
        the fence back from a later owner without a person asking again."""
        message = (
            f"took over the sink fence of {pipeline.key} from {previous} (annotation "
            f"{ADOPT_ANNOTATION}) at epoch {epoch}; that writer's drivers are fenced"
        )
        self.kube.event(obj, "FenceAdopted", message, warning=True)
        log.warning("%s", message)
        return self.kube.remove_annotation(obj, ADOPT_ANNOTATION) or obj

    def _launch(
        self,
        obj: dict[str, Any],
        pipeline: Pipeline,
        epoch: int,
        last_good: LastGood | None = None,
        keep_configmap: bool = False,
    ) -> dict[str, Any]:
        """Create the driver of ``epoch``, recording the epoch in status *before* the pod.

        Once a pod create was sent, its epoch is spent: the pod may run (on a node that is
        later lost, its object force-deleted) even if this operator dies before the next line.
        With status.epoch written first the planner never relaunches with that epoch again.

        With ``last_good`` the driver runs a spec other than the object's (``pipeline`` is
        that one) and carries the generation that spec came from: the last good spec of a
        refused object (``keep_configmap``: the spec ConfigMap holds it and is left as it is),
        or the last stable spec after a rollback (written to the spec ConfigMap).
        """
        image = job_image(pipeline, self.settings.job_image)
        account = pipeline.spec.driver.service_account or self.settings.driver_service_account
        pod = driver_pod(
            pipeline,
            obj,
            epoch,
            image,
            account,
            self.settings.node_lost_grace_seconds,
            self.settings.platform_assigns_uid,
            None if last_good is None else last_good.generation,
        )
        if last_good is not None and last_good.generation is None:
            # A ConfigMap of an older operator, and no status.driverGeneration: not the object's
            # generation, which is the refused spec's.
            del pod["metadata"]["annotations"][ANNOTATION_GENERATION]
        generation = pod["metadata"]["annotations"].get(ANNOTATION_GENERATION)
        obj = (
            self.kube.patch_status(
                obj,
                {
                    "epoch": epoch,
                    "driverPod": pod["metadata"]["name"],
                    "driverSpecHash": pod["metadata"]["labels"][LABEL_SPEC_HASH],
                    "driverGeneration": None if generation is None else int(generation),
                    "lastLaunchTime": datetime.now(UTC).isoformat(),
                },
            )
            or obj
        )
        if not keep_configmap:
            config_map = spec_configmap(
                pipeline, obj, None if last_good is None else last_good.generation
            )
            if last_good is not None and last_good.generation is None:
                del config_map["metadata"]["annotations"][ANNOTATION_GENERATION]
            self.kube.apply(config_map)
        self.kube.apply(driver_service(pipeline, obj))
        self.kube.apply(pod)
        if os.environ.get(FAULT_ENV) == "after-launch":
            os.kill(os.getpid(), signal.SIGKILL)
        self.kube.event(obj, "Launched", f"driver {pod['metadata']['name']} with epoch {epoch}")
        return obj

    def _health(
        self,
        obj: dict[str, Any],
        pipeline: Pipeline,
        memory: Memory,
        driver: DriverPod | None,
        driver_ip: str | None = None,
    ) -> None:
        """Every ``health_interval``: sweep, read the decision log, update status and metrics."""
        key = (pipeline.metadata.namespace, pipeline.metadata.name)
        idle = (
            memory.phase in (Phase.SUSPENDED, Phase.FAILED)
            and driver is None
            and self._in_doubt.get(key) == 0
        )
        interval = self.settings.idle_health_interval if idle else self.settings.health_interval
        if time.monotonic() - self._health_at.get(key, 0.0) < interval:
            return
        self._health_at[key] = time.monotonic()
        if driver_ip is not None and driver is not None:
            progress = read_driver_progress(
                driver_ip, pipeline.spec.driver.metrics_port, pipeline.key
            )
            seen = watch(self._watches.get(key), driver.name, progress, time.time())
            if seen is None:
                self._watches.pop(key, None)  # a new pod, not heard yet
            else:
                self._watches[key] = seen
            if progress is not None:
                self.metrics.observe_driver_progress(
                    *key, progress.last_trigger_time, progress.offsets_behind_latest
                )
        try:
            dsns = dsns_from_secrets(self.kube, pipeline)
            sinks = PipelineSinks(pipeline, dsns, self.kube)
        except Exception as exc:  # report, never crash the loop
            self.kube.patch_status(
                obj,
                {
                    "conditions": conditions(
                        obj.get("status") or {},
                        "SinkReachable",
                        False,
                        *_sink_problem(exc, "SecretUnavailable", key[0]),
                    )
                },
            )
            return
        try:
            swept = sinks.sweep()
            if swept.committed or swept.rolled_back:
                self.metrics.record_resolution(
                    *key, committed=len(swept.committed), rolled_back=len(swept.rolled_back)
                )
                self.kube.event(
                    obj,
                    "Swept",
                    f"stale-epoch transactions: {len(swept.committed)} "
                    f"committed, {len(swept.rolled_back)} rolled back",
                )
            health = sinks.health(None)
            fresh = self._tallies.setdefault(key, BatchTally()).read(
                sinks.bound.control, sinks.bound.pipeline
            )
            records = (
                sinks.bound.control.lifecycle_records(sinks.bound.pipeline)
                if pipeline.spec.lifecycle is not None or (obj.get("status") or {}).get("lifecycle")
                else []
            )
        except Exception as exc:
            self.kube.patch_status(
                obj,
                {
                    "conditions": conditions(
                        obj.get("status") or {},
                        "SinkReachable",
                        False,
                        *_sink_problem(exc, "SinkUnreachable", key[0]),
                    )
                },
            )
            return
        finally:
            sinks.close()
        self._in_doubt[key] = health.in_doubt
        if health.last_commit_time is not None:
            self._commits[key] = health.last_commit_time
        if health.last_epoch is not None:
            self._decided[key] = health.last_epoch
        obj = self._publish(obj, pipeline, memory, driver, health, fresh, records)
        try:
            self.audits.run(obj, pipeline, sinks.bound.dsns, sinks.bound.control)
        except Conflict:
            raise
        except Exception:  # the databases just answered: report, retry on the next interval
            log.exception("%s: audit pass failed", pipeline.key)
        finally:
            sinks.bound.control.close()

    def _publish(
        self,
        obj: dict[str, Any],
        pipeline: Pipeline,
        memory: Memory,
        driver: DriverPod | None,
        health: Health,
        fresh: Fresh,
        records: Sequence[LifecycleRecord] = (),
    ) -> dict[str, Any]:
        """Status and metrics of one health pass; returns the object as written."""
        key = (pipeline.metadata.namespace, pipeline.metadata.name)
        spec = pipeline.spec
        status: dict[str, Any] = {
            "lastBatchId": health.last_batch_id,
            "lastCommitTime": health.last_commit_time.isoformat()
            if health.last_commit_time
            else None,
            "checkpointDurationSeconds": health.checkpoint_seconds,
            "commitDurationSeconds": health.commit_seconds,
            "failureRatePercent": None
            if health.failure_rate is None
            else round(health.failure_rate * 100, 2),
            "inDoubtTransactions": health.in_doubt,
            "oldestInDoubtSeconds": health.oldest_in_doubt_seconds,
        }
        current = obj.get("status") or {}
        stalled = (
            memory.phase is Phase.RUNNING
            and health.last_commit_time is not None
            and (datetime.now(UTC) - health.last_commit_time).total_seconds()
            > max(2 * spec.checkpoint.trigger_interval_seconds, spec.alerts.no_commit_floor_seconds)
        )
        conds = conditions(current, "SinkReachable", True, "Connected", "sink databases answer")
        conds = conditions(
            {"conditions": conds},
            "Stalled",
            stalled,
            "NoRecentCommit" if stalled else "Committing",
            "no batch decided recently" if stalled else "batches are being decided",
        )
        shown = lifecycle.view(
            spec,
            records,
            current,
            memory.message if memory.reason == START_OVER_REFUSED else None,
        )
        if shown.status is not None:
            status["lifecycle"] = shown.status
        if shown.condition is not None:
            conds = conditions({"conditions": conds}, lifecycle.CONDITION, *shown.condition)
        status["conditions"] = conds
        if not _unchanged(obj, status):
            obj = self.kube.patch_status(obj, status) or obj
        for reason, message in shown.events:
            self.kube.event(obj, reason, message)
            log.info("%s: %s", pipeline.key, message)
        tally = self._tallies[key]
        self.metrics.observe_health(
            *key,
            PipelineHealth(
                guarantee=str(spec.guarantee),
                epoch=memory.epoch or 0,
                phase=memory.phase.value,
                driver_up=driver is not None and driver.phase == "Running",
                restarts=memory.restarts,
                batches=tally.batches,
                failures=tally.failures,
                failure_rate=health.failure_rate or 0.0,
                trigger_interval_seconds=float(spec.checkpoint.trigger_interval_seconds),
                last_batch_id=health.last_batch_id,
                last_commit_time=health.last_commit_time.timestamp()
                if health.last_commit_time
                else None,
                checkpoint_durations=fresh.checkpoint_seconds,
                commit_durations=fresh.commit_seconds,
                max_checkpoint_duration_seconds=float(spec.alerts.max_checkpoint_duration_seconds),
                max_failure_rate_ratio=spec.alerts.max_failure_rate_percent / 100.0,
                no_commit_floor_seconds=float(spec.alerts.no_commit_floor_seconds),
                in_doubt=health.in_doubt,
                in_doubt_oldest_age_seconds=health.oldest_in_doubt_seconds or 0.0,
                sinks=health.prepared_by_sink,
            ),
        )
        return obj

    def finalize(self, namespace: str, name: str) -> str:
        """Deletion: stop the driver, then fence and resolve everything. Returns a summary."""
        obj = self.kube.get_pipeline(namespace, name)
        if obj is None:
            return "already gone"
        pipeline, _ = parse(obj)
        pods = self.kube.driver_pods(namespace, name)
        for pod in pods:
            self.kube.delete_pod(namespace, pod["metadata"]["name"])
        deadline = time.monotonic() + 90
        while self.kube.driver_pods(namespace, name) and time.monotonic() < deadline:
            time.sleep(1)
        for pod in self.kube.driver_pods(namespace, name):
            self.kube.delete_pod(namespace, pod["metadata"]["name"], grace_seconds=0)
        self.metrics.forget(namespace, name)
        self._tallies.pop((namespace, name), None)
        self._in_doubt.pop((namespace, name), None)
        self._health_at.pop((namespace, name), None)
        self._watches.pop((namespace, name), None)
        self._commits.pop((namespace, name), None)
        self._decided.pop((namespace, name), None)
        if pipeline is None:
            launched = self._last_launched(obj)
            pipeline = None if launched is None else launched[0]
        if pipeline is None:
            return "invalid spec and no driver ever launched: nothing to resolve"
        return clean_up_sinks(
            self.kube,
            namespace,
            name,
            pipeline,
            self.settings.delete_sink_timeout,
            datetime.now(UTC),
            on_let_go=lambda message: self._let_go(namespace, name, message),
        )

    def _let_go(self, namespace: str, name: str, message: str) -> None:
        """A deletion gave up its sink clean-up: counted, and recorded on the operator's pod,
        since the pipeline's own events go with its namespace (operator audit N5)."""
        self.metrics.finalized_without_sink(namespace, name)
        self.kube.operator_event("FinalizedWithoutSink", message, warning=True)

    def _stable_spec(
        self, obj: dict[str, Any], pipeline: Pipeline, current: str, memory: Memory
    ) -> tuple[Pipeline, LastGood] | None:
        """The last stable spec's content (``Observation.stable_spec``), read only while a
        rollback is in force, or may become due (``restartPolicy.rollbackAfterSeconds`` set
        and the object's spec is not the last stable one): no read for any other pass.

        From its copy (``stable_configmap_name``) when that is the spec wanted, else from the
        spec ConfigMap when that still is (a stable spec recorded by an operator that kept no
        copy), which is then copied.
        """
        rolled, last = memory.rolled_back, memory.last_stable
        want = None if rolled is None else rolled.to_spec_hash
        if (
            want is None
            and last is not None
            and last.spec_hash != current
            and pipeline.spec.restart_policy.rollback_after_seconds is not None
        ):
            want = last.spec_hash
        if want is None:
            return None
        name = obj["metadata"]["name"]
        for config_map in (stable_configmap_name(name), spec_configmap_name(name)):
            found = self._spec_from(obj, config_map)
            if found is None or self._hash(found[0]) != want:
                continue
            held, generation = found
            if config_map != stable_configmap_name(name):
                self._write_stable(obj, held, generation)
            return held, LastGood(held.spec, want, generation)
        return None

    def _hash(self, pipeline: Pipeline) -> str:
        return spec_hash(pipeline, job_image(pipeline, self.settings.job_image))

    def _keep_stable(self, obj: dict[str, Any], runs: Pipeline | None, last: Stable) -> None:
        """Copy the spec that just became ``status.lastStable`` to its ConfigMap, for a later
        rollback: the spec the pass runs when it is that spec (the usual case), else the spec
        ConfigMap's when that is; nothing when neither is (no rollback to it then)."""
        candidates = [] if runs is None else [runs]
        launched = self._last_launched(obj)
        if launched is not None:
            candidates.append(launched[0])
        for held in candidates:
            if self._hash(held) == last.spec_hash:
                self._write_stable(obj, held, last.generation)
                return

    def _write_stable(
        self, obj: dict[str, Any], pipeline: Pipeline, generation: int | None
    ) -> None:
        """Write ``pipeline``'s spec, from ``generation``, as the copy of the last stable one."""
        manifest = spec_configmap(
            pipeline, obj, generation, stable_configmap_name(obj["metadata"]["name"])
        )
        if generation is None:
            del manifest["metadata"]["annotations"][ANNOTATION_GENERATION]
        self.kube.apply(manifest)

    def _last_launched(self, obj: dict[str, Any]) -> tuple[Pipeline, int | None] | None:
        """The spec the last driver ran with (its ConfigMap) and the generation it came from
        (the ConfigMap's annotation, else status.driverGeneration), for an object whose spec
        does not parse any more: that driver may have left prepared transactions (its grace
        can expire mid-batch), and they are resolved with the sinks it wrote to; a driver that
        fails is relaunched from it (``_last_good``). None when there is no such ConfigMap, or
        this operator refuses its spec too."""
        return self._spec_from(obj, spec_configmap_name(obj["metadata"]["name"]))

    def _spec_from(
        self, obj: dict[str, Any], config_map: str
    ) -> tuple[Pipeline, int | None] | None:
        """The spec a ConfigMap of the pipeline holds, and the generation it came from (its
        annotation; for the spec ConfigMap of an older operator, status.driverGeneration)."""
        meta = obj["metadata"]
        found = self.kube.config_map(meta["namespace"], config_map)
        if found is None or SPEC_KEY not in found[0]:
            return None
        data, notes = found
        document = yaml.safe_load(data[SPEC_KEY])
        if not isinstance(document, dict):
            return None
        document["metadata"] = {**document.get("metadata", {}), **meta}
        pipeline, _ = parse(document)
        if pipeline is None:
            return None
        text = notes.get(ANNOTATION_GENERATION, "")
        if text.isdigit():
            return pipeline, int(text)
        recorded = (obj.get("status") or {}).get("driverGeneration")
        if config_map != spec_configmap_name(meta["name"]) or not isinstance(recorded, int):
            return pipeline, None
        return pipeline, recorded

    def _last_good(self, obj: dict[str, Any]) -> tuple[Pipeline, LastGood] | None:
        """The last good spec of an object whose spec is refused (``planner.LastGood``): the
        last launched one, with ``suspend`` as the object says, so that a suspend asked for in
        the same (or a later) refused edit still stops the driver."""
        launched = self._last_launched(obj)
        if launched is None:
            return None
        pipeline, generation = launched
        suspend = (obj.get("spec") or {}).get("suspend")
        if isinstance(suspend, bool) and suspend != pipeline.spec.suspend:
            spec = pipeline.spec.model_copy(update={"suspend": suspend})
            pipeline = pipeline.model_copy(update={"spec": spec})
        image = job_image(pipeline, self.settings.job_image)
        return pipeline, LastGood(pipeline.spec, spec_hash(pipeline, image), generation)


def _standing_in(result: Plan, obs: Observation) -> tuple[LastGood | None, bool]:
    """The spec a launch of ``result`` runs when it is not the object's, and whether the spec
    ConfigMap already holds it: the last good spec of a refused object (it does), the last
    stable spec of a rollback (it is written)."""
    if obs.spec is None:
        return obs.last_good, True
    rolled = result.memory.rolled_back
    if rolled is not None and rolled.from_generation == obs.generation:
        return obs.stable_spec, False
    return None, False


def merge_patched(current: Any, patch: Any) -> Any:
    """``current`` after a JSON merge patch (RFC 7386): objects merge key by key at every
    level, a null removes its key, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(current) if isinstance(current, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patched(merged.get(key), value)
    return merged


def _unchanged(obj: dict[str, Any], status: dict[str, Any]) -> bool:
    """True when merge-patching ``status`` would not change the object's status, at every
    level (a nested null, e.g. a failure with no exit code, removes a key the last failure
    may have had: it matches a missing one, and changes a present one)."""
    current = obj.get("status") or {}
    return bool(merge_patched(current, status) == current)


def _sink_answered(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """Conditions with SinkReachable True: a recovery just used every sink database; and with
    FenceOwned True if it was ever False: the recovery claimed the fence for this object."""
    status = obj.get("status") or {}
    conds = conditions(status, SINK, True, "Connected", "sink databases answer")
    if any(c.get("type") == FENCE for c in conds):
        owner = fence_owner(obj)
        conds = conditions(
            {"conditions": conds}, FENCE, True, "Owned", f"this object ({owner}) owns the fence"
        )
    return conds


def _sink_problem(exc: Exception, default: str, namespace: str) -> tuple[str, str]:
    """Reason and message for SinkReachable=False, never quoting a connection string."""
    blocker = classify(exc, namespace)
    if blocker is not None:
        return blocker.reason, blocker.message
    return default, safe_message(exc)


class RetrySoon(Exception):  # noqa: N818
    """Something changed under us; reconcile again shortly."""
