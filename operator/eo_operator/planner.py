"""The pure planner: (spec, status, epoch annotation, observed driver pod, now) -> plan.

No I/O, no kopf: every decision the operator makes about a pipeline's driver is here, so every
edge of the state machine is a unit test. The rules, in the order they are checked:

| # | observation | plan |
| --- | --- | --- |
| 1 | spec invalid, a last good spec (``last_good``: | rules 2-14 with that spec in its place, |
|  | the spec ConfigMap a driver was launched from) | but no rule 6: a live driver keeps it |
|  |  | (reason InvalidSpec, a warning event per |
|  |  | new error); a failed, lost, hung one goes |
|  |  | the failure path and is relaunched from |
|  |  | it (``LastGoodSpec`` event) |
|  | spec invalid, no last good spec, a live driver | keep it; reason InvalidSpec, event |
|  | spec invalid, no last good spec, no live driver | phase Failed (InvalidSpec) |
| 1b | rolled back (``Memory.rolled_back``) and not | rules 2-14 with the last stable spec |
|  | edited since; or restartPolicy.rollbackAfter- | (``stable_spec``) in the object's place, |
|  | Seconds passed since the new spec's first launch | rule 6 against it: its driver is stopped |
|  | (``Memory.rollout``) and it is not stable | and that spec relaunched; reason and |
|  | (``_rollback``) | condition RolledBack, a Warning event |
| 2 | driver lost: its node not Ready past the node-lost | recover (fence), force-delete, restart |
|  | grace, stuck Terminating, or phase Unknown | (counted once per lost pod; under suspend: |
|  |  | no restart, no launch) |
| 3 | suspend and a driver exists | Stopping: graceful delete (batch boundary) |
| 4 | suspend and no driver | recover (again until it finished), then Suspended |
| 5 | driver of an older epoch | delete it (a zombie of a past launch) |
| 6 | driver Pending/Running, spec changed | Stopping: graceful delete, relaunch after |
|  | (``spec_hash``: what the driver runs) |  |
| 7 | driver Pending past restartPolicy.startTimeoutSeconds | delete it; a counted failure |
|  |  | (StartTimeout, its waiting reason in status.lastFailure), as in 10 |
| 7b | driver Running, no progress for | delete it; a counted failure (DriverHung) |
|  | restartPolicy.progressTimeoutSeconds | as in 7; held while the operator is blocked |
|  | (its endpoint answered the operator) | (the restart could not recover) |
| 8 | driver Pending/Running | Starting/Running |
|  | driver exited while Stopping (being deleted) | wait for it to go: not a crash |
| 9 | driver exited 76 / 77 / 79 | Failed (CheckpointReset / SinkContract / |
|  |  | StartOverRefused) |
| 10 | driver exited 75 (fenced) | delete it; relaunch above the fence, not a crash |
| 11 | driver exited otherwise, or vanished while running | count a restart; Failed past max; |
|  |  | else Backoff, then recover + relaunch |
|  | no driver, spec edited since the last failure | restart count and backoff start over |
| 12 | no driver, Failed, same generation | stay Failed |
| 13 | no driver, backoff not over | wait |
| 14 | no driver | recover (fence first) + launch |
|  | ... blocked (Secret, database, ServiceAccount: ``Memory.blocked``) | retry every 10 s; |
|  |  | Failed (the blocker's reason) past restartPolicy.startTimeoutSeconds |
|  | ... the sink fence is another writer's (``ForeignFenceOwner``) | Waiting, retry every |
|  |  | 30 s, never Failed: a hand-over is a person's decision |

A failed driver (rules 9 and 11) is not deleted: its pod, log and termination message stay for
people (``status.lastFailure.pod``). A failed pod the planner already recorded
(``lastFailure.pod``), and any failed pod of an older epoch, counts as "no driver" for the rules
above; after every plan the newest ``restartPolicy.keepFailedPods`` of them are kept and older
ones deleted (``prune_failed``).

After every plan, whatever the rule, two records are kept in status for people:

* ``lastStable`` (``Memory.last_stable``): the spec hash and generation of the last driver seen
  Running while the decision log's newest batch carries its epoch: it reached Running and
  decided (committed) a batch after its launch, by itself (``stable``). Never cleared, so a new
  spec that fails leaves the previous stable one.
* ``history`` (``Memory.history``): a transition is appended when the phase or the reason
  changes, not on every pass; the newest ``HISTORY_MAX`` are kept, each message cut to
  ``HISTORY_MESSAGE_MAX`` characters (``recorded``).

"Recover" always means, in this order: reserve the next epoch on the object (annotation,
guarded by resourceVersion), raise the sink fence to it, resolve prepared transactions below
it. A reserved epoch whose driver never appeared is reused, so an operator restarted in the
middle of a recovery completes that recovery instead of starting another.

An epoch is never handed to two drivers: ``status.epoch`` is written before a driver pod is
created, every rule records the epoch of the pod it observed, and the next epoch is above
both (``next_epoch``). A sink fence above the plan (a re-created pipeline, a manual
``eo recover --epoch N``) is read by the reconciler before it reserves, and jumped.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from eo_jobs.protocol.errors import (
    EXIT_CHECKPOINT_RESET,
    EXIT_FENCED,
    EXIT_LIFECYCLE_REFUSED,
    EXIT_SINK_CONTRACT,
)
from eo_jobs.spec.models import PipelineSpec

STUCK_TERMINATING_GRACE = timedelta(seconds=30)
NODE_LOST_GRACE_SECONDS = 30
"""Default of the operator's node-lost grace (``EO_NODE_LOST_GRACE_SECONDS``): how long a driver
may sit on a node that is not Ready before it is fenced and replaced."""
LOST = "DriverLost"
SUSPENDED_MESSAGE = "driver stopped; in-doubt transactions resolved"
TERMINATED = ("Succeeded", "Failed")
HUNG = "DriverHung"
"""Reason (event, status, lastFailure) of a Running driver restarted for making no progress."""
PROGRESS_TIMEOUT_FLOOR = 600
"""The least ``progress_timeout`` of a spec that names none."""
HISTORY_MAX = 10
"""Transitions kept in status.history (the newest)."""
HISTORY_MESSAGE_MAX = 200
"""Characters of a status message a transition keeps."""
FOREIGN_FENCE_OWNER = "ForeignFenceOwner"
"""The blocker reason of a sink fence another writer owns: a wait for a hand-over (phase
Waiting), never a failure."""


START_OVER_REFUSED = "StartOverRefused"
"""Reason of a driver that refused spec.lifecycle.startOver (exit 79)."""
PERMANENT = {
    EXIT_CHECKPOINT_RESET: "CheckpointReset",
    EXIT_SINK_CONTRACT: "SinkContract",
    EXIT_LIFECYCLE_REFUSED: START_OVER_REFUSED,
}
"""Exit codes a restart cannot fix (rule 9), with their reason: Failed until the spec is edited."""


class Phase(enum.StrEnum):
    """Pipeline phases shown in status and metrics."""

    PENDING = "Pending"
    STARTING = "Starting"
    RUNNING = "Running"
    RECOVERING = "Recovering"
    BACKOFF = "Backoff"
    SUSPENDED = "Suspended"
    STOPPING = "Stopping"
    FAILED = "Failed"
    WAITING = "Waiting"
    """Another writer owns the sink fence: waiting for a hand-over (``fence_owner``)."""


BLOCKED_RETRY_MAX = 60.0
"""Seconds between retries of a launch the environment has refused for 10 minutes or more."""
DRIVER_CREATABLE = "DriverCreatable"
"""Condition of a blocker that refused a driver object (HTTP 403: nothing was created)."""
NODE_DISRUPTION = "NodeDisruption"
"""Reason (and status condition) while the disruption guard holds rule 2."""


@dataclass(frozen=True)
class DriverPod:
    """What the operator observed of the driver pod."""

    name: str
    epoch: int
    phase: str
    spec_hash: str
    exit_code: int | None = None
    deleting_since: datetime | None = None
    grace_seconds: int = 60
    created_at: datetime | None = None
    reason: str = ""
    """Why it is not running: the container's waiting reason while Pending (ImagePullBackOff,
    CreateContainerConfigError, ...; Unschedulable before it has a node), its terminated
    reason once it exited (Error, OOMKilled, ...)."""
    message: str = ""
    """The waiting message, or the terminated container's termination message."""
    node: str = ""
    """The node the pod is bound to (``spec.nodeName``)."""
    node_problem: str = ""
    """What is wrong with that node, observed once the pod stopped being Ready
    (``Ready=Unknown (NodeStatusUnknown: ...)``: the node lifecycle controller heard nothing
    from its kubelet; ``Ready=False (...)``; ``gone``); empty while the node is Ready."""
    node_problem_since: datetime | None = None
    """When the node stopped being Ready (its Ready condition's last transition); None with a
    problem means since an unknown time, longer than any grace."""
    generation: int | None = None
    """The metadata.generation of the spec it was launched with (its eo.dev/generation
    annotation); None for a pod launched by an operator older than that annotation."""

    @property
    def terminated(self) -> bool:
        """The pod's containers have all exited (phase Succeeded or Failed)."""
        return self.phase in TERMINATED


@dataclass(frozen=True)
class Failure:
    """A failed driver as recorded in status (``status.lastFailure``)."""

    pod: str
    reason: str
    exit_code: int | None
    message: str
    time: datetime


@dataclass(frozen=True)
class Blocked:
    """What the environment refused on the last recovery or launch (a condition in status)."""

    condition: str
    reason: str
    message: str
    since: datetime


@dataclass(frozen=True)
class Stable:
    """The last spec a driver ran stable with (status.lastStable)."""

    spec_hash: str
    generation: int | None
    since: datetime
    """When the operator first saw it stable."""


@dataclass(frozen=True)
class Rollout:
    """The spec hash last launched and when it first was (status.rollout): the clock of
    ``restartPolicy.rollbackAfterSeconds``."""

    spec_hash: str
    generation: int | None
    since: datetime


@dataclass(frozen=True)
class RolledBack:
    """An automatic rollback in force (status.rolledBack) until the generation changes."""

    from_generation: int
    from_spec_hash: str
    to_generation: int | None
    to_spec_hash: str
    time: datetime


@dataclass(frozen=True)
class Transition:
    """A change of phase or reason (an entry of status.history)."""

    time: datetime
    phase: str
    reason: str
    message: str
    epoch: int | None
    """The epoch of the driver it concerns: the one the plan launches, else status.epoch."""


@dataclass(frozen=True)
class LastGood:
    """The last spec eo launched a driver with (its spec ConfigMap), for an object whose spec
    eo refuses: what a failed driver is relaunched from (rule 1)."""

    spec: PipelineSpec
    """The ConfigMap's spec, with ``suspend`` as the object says (the API server's schema keeps
    that a boolean whatever else is wrong): a suspend is honoured while the spec is refused."""
    spec_hash: str
    """``resources.spec_hash`` of that spec and the driver image."""
    generation: int | None
    """The metadata.generation it was launched from (the ConfigMap's eo.dev/generation
    annotation, else status.driverGeneration); None when neither says."""


@dataclass(frozen=True)
class Memory:
    """Operator bookkeeping kept in status between reconciles."""

    phase: Phase = Phase.PENDING
    epoch: int | None = None
    """Highest epoch a driver pod was created with or observed carrying (status.epoch); the
    reconciler records it before it creates the pod."""
    restarts: int = 0
    last_failure: datetime | None = None
    backoff_until: datetime | None = None
    last_launch: datetime | None = None
    failed_generation: int | None = None
    """Generation the last counted failure ran with (status.failedGeneration): an edit since
    resets the restart count and the backoff, and lifts Failed."""
    recovered_epoch: int | None = None
    """Epoch of the last recovery that finished (status.recoveredEpoch)."""
    reason: str = ""
    message: str = ""
    failure: Failure | None = None
    """The last failed driver (status.lastFailure); its pod is not observed as a driver again."""
    blocked: Blocked | None = None
    """Why the last recovery or launch could not be done (a missing Secret, a database that
    does not answer, ...), since when; cleared by the next one that succeeds."""
    last_stable: Stable | None = None
    """The last spec a driver ran stable with (``stable``); never cleared."""
    history: tuple[Transition, ...] = ()
    """The newest ``HISTORY_MAX`` changes of phase or reason, oldest first (``recorded``)."""
    rollout: Rollout | None = None
    """The spec hash last launched while not the last stable one, since its first launch."""
    rolled_back: RolledBack | None = None
    """A rollback to the last stable spec (``restartPolicy.rollbackAfterSeconds``): while the
    generation is still ``from_generation`` the last stable spec runs instead."""


@dataclass(frozen=True)
class Observation:
    """Planner input."""

    now: datetime
    generation: int
    spec: PipelineSpec | None
    spec_error: str | None
    spec_hash: str
    """``resources.spec_hash`` of the spec and the driver's image: a driver pod labelled with
    another hash runs something else and is restarted (rule 6)."""
    annotation_epoch: int | None
    memory: Memory
    driver: DriverPod | None
    failed: tuple[DriverPod, ...] = ()
    """Exited pods of older epochs than ``driver`` (not fenced, not being deleted): failed
    drivers kept for their logs."""
    node_lost_grace: timedelta = timedelta(seconds=NODE_LOST_GRACE_SECONDS)
    """How long the driver's node may be not Ready before the driver counts as lost (rule 2):
    an operator setting, not part of the spec."""
    node_disruption: str = ""
    """Why the driver's node problem is the cluster's (``disruption``): rule 2 then holds."""
    progress: datetime | None = None
    """The newest progress of ``driver`` the operator saw (``progress.Watch``): the last trigger
    its metrics endpoint reported (else when that endpoint first answered), or the last decided
    batch if newer. None while the pod's endpoint has not answered this operator process: rule
    7b then does not judge it, since the operator cannot tell a hung driver from one it cannot
    reach (a NetworkPolicy, its own restart, a driver still starting)."""
    legacy_spec_hashes: frozenset[str] = frozenset()
    """The spec's hashes by the formula drivers launched before ``spec_hash`` was narrowed carry
    (``legacy_hash``): a pod with one of them runs the current spec, and is not restarted for a
    change of formula."""
    decided_epoch: int | None = None
    """The epoch of the newest batch in the decision log, as this operator process last read it
    (its health pass); None before it read one. Equal to the driver's epoch, it says that
    driver decided a batch since its launch (an epoch is handed to one driver only)."""
    stable_spec: LastGood | None = None
    """The last stable spec's content (the operator's copy of it, its stable ConfigMap), read
    while an automatic rollback may be due or is in force; its ``spec_hash`` is that of
    ``memory.last_stable`` when it is the copy of that spec."""
    last_good: LastGood | None = None
    """With ``spec`` None (refused): the last spec a driver was launched with, if any (rule 1).
    The planner then plans with it in ``spec``'s place and keeps ``spec_error``: a spec with a
    ``spec_error`` is a stand-in for a refused one, and is never a spec change (rule 6)."""


class Kind(enum.StrEnum):
    """Action kinds, performed in list order by the handlers."""

    RECOVER = "recover"
    LAUNCH = "launch"
    DELETE_POD = "delete-pod"
    FORCE_DELETE_POD = "force-delete-pod"
    EVENT = "event"


@dataclass(frozen=True)
class Action:
    """One side effect to perform."""

    kind: Kind
    epoch: int | None = None
    pod: str | None = None
    reason: str = ""
    message: str = ""
    warning: bool = False


@dataclass(frozen=True)
class Plan:
    """Planner output: status to record first, then actions, then when to look again."""

    memory: Memory
    actions: list[Action] = field(default_factory=list)
    requeue_seconds: float = 5.0


def next_epoch(obs: Observation) -> int:
    """The epoch to (re)launch with: a reserved-but-unused one, or one above everything.

    "Used" is ``status.epoch`` (written before a pod is created, and raised by ``plan`` to the
    epoch of any pod it observes) and the observed pod's epoch: reusing an epoch a pod was
    created with would run two drivers with one epoch, neither fenced against the other. A
    sink fence above this (a re-created pipeline, a manual ``eo recover``) is handled by the
    reconciler, which reads the fence before it reserves.
    """
    reserved = obs.annotation_epoch or 0
    used = max(obs.memory.epoch or 0, obs.driver.epoch if obs.driver else 0)
    if reserved > used:
        return reserved
    return max(reserved, used) + 1


def backoff_seconds(spec: PipelineSpec, failures: int, rng: random.Random) -> float:
    """Capped exponential backoff with +-20% jitter."""
    policy = spec.restart_policy
    base = min(policy.backoff_seconds * 2 ** max(failures - 1, 0), policy.max_backoff_seconds)
    return float(base * rng.uniform(0.8, 1.2))


def progress_timeout(spec: PipelineSpec) -> int | None:
    """The no-progress bound of rule 7b in seconds, None when off (0).

    Unset, it is twice the longest a healthy driver goes without a heartbeat: a batch may take
    ``alerts.maxCheckpointDurationSeconds`` (beyond it the slow-batch alert fires) and start a
    trigger interval after the previous one ended; at least ``PROGRESS_TIMEOUT_FLOOR``.
    """
    explicit = spec.restart_policy.progress_timeout_seconds
    if explicit is not None:
        return explicit or None
    gap = spec.alerts.max_checkpoint_duration_seconds + spec.checkpoint.trigger_interval_seconds
    return max(PROGRESS_TIMEOUT_FLOOR, 2 * gap)


def _event(reason: str, message: str, warning: bool = False) -> Action:
    return Action(Kind.EVENT, reason=reason, message=message, warning=warning)


def _relaunch(obs: Observation, memory: Memory, reason: str, message: str) -> Plan:
    epoch = next_epoch(obs)
    launched = replace(
        memory,
        phase=Phase.STARTING,
        backoff_until=None,
        reason=reason,
        message=message,
    )
    return Plan(
        launched,
        [
            Action(Kind.RECOVER, epoch=epoch, reason=reason),
            Action(Kind.LAUNCH, epoch=epoch, reason=reason),
            _event(reason, message),
        ],
        requeue_seconds=2.0,
    )


def plan(obs: Observation, rng: random.Random | None = None) -> Plan:
    """Decide what to do next for one pipeline."""
    rng = rng or random.Random()  # noqa: S311 (jitter, not cryptography)
    pod = obs.driver
    if pod is not None and pod.epoch > (obs.memory.epoch or 0):
        # Remember every epoch a pod was seen with, whatever the rule: status.epoch can lag a
        # pod the operator applied just before it died, and the pod object can be gone by the
        # next pass (deleted after it exited, or force-deleted with its node) while its epoch
        # must still never be handed to another driver.
        obs = replace(obs, memory=replace(obs.memory, epoch=pod.epoch))
    before = obs.memory
    refused = obs if obs.spec is None and obs.last_good is not None else None
    rolled: Observation | None = None
    if refused is not None:
        assert refused.last_good is not None
        obs = _standing_in(refused, refused.last_good)
    elif obs.spec is not None:
        obs, rolled = _rollback(obs)
    obs, cleanup = _set_aside_failed(obs)
    result = _decide(obs, rng)
    if refused is not None:
        result = _on_last_good(refused, result)
    elif rolled is not None:
        result = _on_rollback(rolled, before, result)
    else:
        result = replace(result, memory=_rolling_out(obs, result))
    memory = stable(obs, pod, result.memory)
    memory = recorded(before, replace(result, memory=memory), obs.now)
    return replace(
        result, memory=memory, actions=[*cleanup, *result.actions, *prune_failed(obs, result)]
    )


def _standing_in(obs: Observation, last: LastGood) -> Observation:
    """The observation with ``last`` in the object's spec's place: the last good spec for a
    refused one (rule 1), the last stable spec after a rollback (``_rollback``).

    Its generation stands in too, so a failure under it is recorded against the generation
    that runs (``failed_generation``): another refused edit is no fix (it resets no restart
    budget and lifts no Failed), a valid edit is. For a refused spec ``spec_error`` stays,
    which turns rule 6 off: the running driver's spec is what eo has, whatever its hash says
    (an operator upgrade's job image, an older hash formula). After a rollback rule 6 compares
    with the last stable spec: the driver of the rolled-back spec is stopped.
    """
    return replace(
        obs,
        spec=last.spec,
        spec_hash=last.spec_hash,
        legacy_spec_hashes=frozenset(),
        generation=obs.generation if last.generation is None else last.generation,
    )


def good_spec(last: LastGood) -> str:
    """How status and events name the last good spec."""
    which = "" if last.generation is None else f"generation {last.generation}, "
    return f"the last good spec ({which}spec hash {last.spec_hash})"


def _on_last_good(refused: Observation, result: Plan) -> Plan:
    """Rule 1 with a last good spec: what rules 2-14 planned with it, said to be that.

    A driver that keeps running (rule 8, nothing done) has reason InvalidSpec; any other plan
    (a failure counted, a backoff, a relaunch, a stop) keeps its reason, and its message adds
    that the object's spec is refused and which spec runs instead. Whatever the plan, a warning
    ``InvalidSpec`` event is sent per new error (one the last status message did not carry),
    and a relaunch from the last good spec is a ``LastGoodSpec`` warning event.
    """
    last = refused.last_good
    assert last is not None
    before, mem = refused.memory, result.memory
    error = refused.spec_error or "invalid spec"
    good = good_spec(last)
    acts = {a.kind for a in result.actions}
    events = []
    if error not in before.message:
        events.append(_event("InvalidSpec", f"{error}; eo runs {good}", warning=True))
    if mem.phase in (Phase.RUNNING, Phase.STARTING) and not acts & {
        Kind.RECOVER,
        Kind.LAUNCH,
        Kind.DELETE_POD,
        Kind.FORCE_DELETE_POD,
    }:
        kept = f"{error} (the driver keeps running the last valid spec it started with: {good})"
        memory = replace(mem, reason="InvalidSpec", message=kept)
        return replace(result, memory=memory, actions=[*result.actions, *events])
    said = (
        f"the object's spec (generation {refused.generation}) is refused: {error}; "
        f"eo runs {good} until a valid edit"
    )
    memory = replace(mem, message=f"{mem.message}; {said}" if mem.message else said)
    launch = next((a for a in result.actions if a.kind is Kind.LAUNCH), None)
    if launch is not None:
        events.append(
            _event(
                "LastGoodSpec",
                f"driver relaunched with epoch {launch.epoch} from {good}: the object's spec "
                f"(generation {refused.generation}) is refused: {error}",
                warning=True,
            )
        )
    return replace(result, memory=memory, actions=[*result.actions, *events])


def _rollback(obs: Observation) -> tuple[Observation, Observation | None]:
    """The automatic rollback (``restartPolicy.rollbackAfterSeconds``): the observation to plan
    with, and the original one when the last stable spec stands in for the object's.

    In force (``memory.rolled_back``) while the generation is the one rolled back from: it is
    not retried against that generation (no flapping), and any edit ends it (a revert to the
    last stable spec too, which then restarts nothing). Due when the object's spec is not the
    last stable one, its first launch (``memory.rollout``) is older than the bound, and its
    driver is not stable by now (``stable``); never under suspend, never without the last
    stable spec's content (``stable_spec``), which a spec that never ran stable has not, and
    never before this operator process read the decision log (``decided_epoch``): after an
    operator restart a driver that decides batches would look unstable until then.
    """
    mem, spec = obs.memory, obs.spec
    assert spec is not None
    done = mem.rolled_back
    if done is not None and done.from_generation != obs.generation:
        # Edited since: the user's new spec is tried (and has its own rollout clock).
        return replace(obs, memory=replace(mem, rolled_back=None)), None
    held = obs.stable_spec
    if done is not None:
        if held is None or held.spec_hash != done.to_spec_hash:
            # Its copy is gone (deleted by hand): the object's spec runs rather than nothing,
            # and status stops saying it is rolled back.
            return replace(obs, memory=replace(mem, rolled_back=None)), None
        return _standing_in(obs, held), obs
    bound = spec.restart_policy.rollback_after_seconds
    last = stable(obs, obs.driver, mem).last_stable
    out = mem.rollout
    if (
        bound is None
        or spec.suspend
        or obs.decided_epoch is None  # this process has not read the decision log yet
        or last is None
        or held is None
        or held.spec_hash != last.spec_hash
        or obs.spec_hash in (last.spec_hash, *obs.legacy_spec_hashes)
        or out is None
        or out.spec_hash != obs.spec_hash
        or obs.now - out.since <= timedelta(seconds=bound)
    ):
        return obs, None
    rolled = RolledBack(obs.generation, obs.spec_hash, held.generation, held.spec_hash, obs.now)
    memory = replace(mem, rolled_back=rolled, rollout=None)
    standing = _standing_in(replace(obs, memory=memory), held)
    return standing, replace(obs, memory=memory)


def _on_rollback(rolled: Observation, before: Memory, result: Plan) -> Plan:
    """A plan made with the last stable spec standing in (``_rollback``), said as a rollback:
    reason RolledBack when it begins and while that spec's driver runs (a failure of it keeps
    its own reason), the message names both specs, a Warning RolledBack event at the start."""
    done = rolled.memory.rolled_back
    spec = rolled.spec
    assert done is not None and spec is not None
    bound = spec.restart_policy.rollback_after_seconds
    to = "" if done.to_generation is None else f"generation {done.to_generation}, "
    said = (
        f"generation {done.from_generation} (spec hash {done.from_spec_hash}) did not run stable "
        f"within restartPolicy.rollbackAfterSeconds {bound}: rolled back to the last stable "
        f"spec ({to}spec hash {done.to_spec_hash}) until the spec is edited"
    )
    mem = result.memory
    acts = {a.kind for a in result.actions}
    quiet = mem.phase in (Phase.RUNNING, Phase.STARTING) and not acts & {
        Kind.RECOVER,
        Kind.LAUNCH,
        Kind.DELETE_POD,
        Kind.FORCE_DELETE_POD,
    }
    first = before.rolled_back is None
    memory = replace(
        mem,
        reason="RolledBack" if quiet or first else mem.reason,
        message=f"{mem.message}; {said}" if mem.message else said,
    )
    actions = list(result.actions)
    if first:
        actions.append(_event("RolledBack", said, warning=True))
    return replace(result, memory=memory, actions=actions)


def _rolling_out(obs: Observation, result: Plan) -> Memory:
    """``memory.rollout`` moved to the object's spec when this plan launches it and it is not
    the spec already rolling out: its first launch starts the rollback clock."""
    mem = result.memory
    if not any(a.kind is Kind.LAUNCH for a in result.actions):
        return mem
    if mem.rollout is not None and mem.rollout.spec_hash == obs.spec_hash:
        return mem
    return replace(mem, rollout=Rollout(obs.spec_hash, obs.generation, obs.now))


def stable(obs: Observation, pod: DriverPod | None, memory: Memory) -> Memory:
    """``memory`` with ``last_stable`` moved to ``pod``'s spec when that driver is stable.

    Stable: the pod is Running and the newest decided batch carries its epoch, so it reached
    Running and decided (committed) a batch after its launch, itself. Whatever the rule
    decided about it (a spec change stopping it, a hung restart), it did run that spec well.
    Recorded once per spec hash and generation (``since`` is when it was first seen); nothing
    else touches it, so a new spec that fails, never starts or decides nothing leaves the
    previous stable one.
    """
    if (
        pod is None
        or pod.phase != "Running"
        or not pod.spec_hash
        or obs.decided_epoch is None
        or obs.decided_epoch != pod.epoch
    ):
        return memory
    last = memory.last_stable
    if last is not None and (last.spec_hash, last.generation) == (pod.spec_hash, pod.generation):
        return memory
    return replace(memory, last_stable=Stable(pod.spec_hash, pod.generation, obs.now))


def recorded(before: Memory, result: Plan, now: datetime) -> Memory:
    """The plan's memory with a transition appended to ``history`` when the phase or the reason
    changed from ``before`` (a pass that changes neither, or only the message, adds nothing),
    the newest ``HISTORY_MAX`` kept."""
    after = result.memory
    if (after.phase, after.reason) == (before.phase, before.reason):
        return after
    launched = next((a.epoch for a in result.actions if a.kind is Kind.LAUNCH), None)
    message = after.message
    if len(message) > HISTORY_MESSAGE_MAX:
        message = message[: HISTORY_MESSAGE_MAX - 3] + "..."
    entry = Transition(
        time=now,
        phase=after.phase.value,
        reason=after.reason,
        message=message,
        epoch=launched if launched is not None else after.epoch,
    )
    return replace(after, history=(*after.history, entry)[-HISTORY_MAX:])


def _set_aside_failed(obs: Observation) -> tuple[Observation, list[Action]]:
    """A driver whose failure is already recorded (or an exited one of an older epoch) is no
    driver any more: an exited one joins the kept failed pods, a Pending one (a start timeout)
    is deleted if its deletion was not sent yet."""
    pod, mem = obs.driver, obs.memory
    if pod is None:
        return obs, []
    # A lost driver (rule 2) stays observed until it is gone, so its fence and force delete
    # are retried; any other recorded failure is done with.
    recorded = (
        mem.failure is not None and mem.failure.pod == pod.name and mem.failure.reason != LOST
    )
    older = pod.terminated and pod.epoch < (mem.epoch or 0) and pod.exit_code != EXIT_FENCED
    if not (recorded or older):
        return obs, []
    failed, cleanup = obs.failed, []
    if pod.deleting_since is None:
        if pod.terminated:
            failed = (pod, *failed)
        else:
            cleanup = [Action(Kind.DELETE_POD, pod=pod.name, reason=mem.reason or "Failed")]
    return replace(obs, driver=None, failed=failed), cleanup


def prune_failed(obs: Observation, result: Plan) -> list[Action]:
    """Delete kept failed pods beyond the newest ``restartPolicy.keepFailedPods``."""
    if obs.spec is None:
        return []
    gone = {a.pod for a in result.actions if a.kind in (Kind.DELETE_POD, Kind.FORCE_DELETE_POD)}
    kept = list(obs.failed)
    pod, failure = obs.driver, result.memory.failure
    if pod is not None and pod.terminated and failure is not None and failure.pod == pod.name:
        kept.append(pod)  # failed in this pass
    kept = sorted((p for p in kept if p.name not in gone), key=lambda p: p.epoch, reverse=True)
    keep = obs.spec.restart_policy.keep_failed_pods
    return [Action(Kind.DELETE_POD, pod=p.name, reason="FailedPodsPruned") for p in kept[keep:]]


def last_line(message: str) -> str:
    """The last non-empty line of a termination message (the tail of the driver's log): the
    one-line error ``eo`` prints, or the exception line ending a traceback."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return lines[-1][:1000] if lines else ""


def _last_good_spec(mem: Memory, message: str) -> Plan:
    """Rule 1 with a live driver but no last good spec known (its ConfigMap is gone): an edit
    the API server took but eo refuses stops nothing.

    The driver runs the spec it was launched with, so it keeps it, as FKO's users have it;
    status says SpecValid=False with the reason, and a warning event is sent per new error. A
    valid edit later is a spec change like any (rule 6); a revert to the running spec is none.
    With the ConfigMap there (the usual case) ``_on_last_good`` says the same, and a failed
    driver is relaunched from it instead of ending in Failed.
    """
    kept = f"{message} (the driver keeps running the last valid spec it started with)"
    actions = (
        [_event("InvalidSpec", kept, warning=True)]
        if mem.reason != "InvalidSpec" or mem.message != kept
        else []
    )
    return Plan(replace(mem, reason="InvalidSpec", message=kept), actions, requeue_seconds=30.0)


def _invalid(obs: Observation) -> Plan:
    """Rule 1: the spec is invalid and there is no last good spec (the first spec was already
    refused, or the spec ConfigMap was deleted): a driver that is gone stays gone (Failed)."""
    mem, pod = obs.memory, obs.driver
    message = obs.spec_error or "invalid spec"
    if pod is not None and pod.deleting_since is None and not pod.terminated:
        return _last_good_spec(mem, message)
    failed = replace(
        mem,
        phase=Phase.FAILED,
        reason="InvalidSpec",
        message=message,
        failed_generation=obs.generation,
    )
    actions = (
        [_event("InvalidSpec", message, warning=True)]
        if mem.reason != "InvalidSpec" or mem.failed_generation != obs.generation
        else []
    )
    if pod is not None and pod.deleting_since is None:
        actions.append(Action(Kind.DELETE_POD, pod=pod.name, reason="InvalidSpec"))
    return Plan(failed, actions, requeue_seconds=30.0)


def _decide(obs: Observation, rng: random.Random) -> Plan:
    # 1. invalid spec, and no last good spec to stand in (``plan``)
    if obs.spec is None:
        return _invalid(obs)
    spec = obs.spec
    if obs.memory.reason == "InvalidSpec" and obs.memory.phase is not Phase.FAILED:
        # Valid again, the driver kept running: rule 6 takes the edit from here.
        obs = replace(obs, memory=replace(obs.memory, reason="", message=""))
    mem = obs.memory
    pod = obs.driver

    # 2. a driver we cannot trust to be dead: fence before anything else
    lost = _lost_because(pod, obs) if pod is not None else ""
    if pod is not None and lost:
        if pod.node_problem and obs.node_disruption:
            return _disrupted(obs, pod, lost)
        return _lost(obs, spec, pod, lost)

    # 3./4. suspend
    if spec.suspend:
        if pod is not None:
            actions = (
                []
                if pod.deleting_since
                else [
                    Action(Kind.DELETE_POD, pod=pod.name, reason="Suspend"),
                    _event("Stopping", f"suspend: stopping driver {pod.name} at a batch boundary"),
                ]
            )
            return Plan(
                replace(
                    mem,
                    phase=Phase.STOPPING,
                    reason="Suspend",
                    message="stopping the driver at a batch boundary",
                ),
                actions,
                2.0,
            )
        # Suspended only counts once a recovery finished above the last driver's epoch and
        # at the reserved one: a recovery that failed (even before it reserved its epoch), or
        # that reserved a higher epoch (a fence ahead), is planned again, and status says so.
        done = max(obs.annotation_epoch or 0, (mem.epoch or 0) + 1)
        if mem.phase != Phase.SUSPENDED or (mem.recovered_epoch or 0) < done:
            epoch = next_epoch(obs)
            retry = mem.phase is Phase.SUSPENDED
            memory = replace(
                mem,
                phase=Phase.SUSPENDED,
                reason="Suspended",
                message=(
                    f"driver stopped; the recovery with epoch {epoch} did not finish: retrying"
                    if retry
                    else f"driver stopped; resolving in-doubt transactions with epoch {epoch}"
                ),
            )
            actions = [Action(Kind.RECOVER, epoch=epoch, reason="Suspend")]
            if not retry:
                actions.append(_event("Suspended", memory.message))
            return Plan(memory, actions, 30.0 if not retry else 10.0)
        return Plan(replace(mem, message=SUSPENDED_MESSAGE), [], 30.0)

    # 5. a leftover driver of an older epoch
    if pod is not None and mem.epoch is not None and pod.epoch < mem.epoch:
        if pod.deleting_since is None:
            return Plan(mem, [Action(Kind.DELETE_POD, pod=pod.name, reason="StaleEpoch")], 2.0)
        return Plan(mem, [], 2.0)

    if pod is not None and pod.deleting_since is not None and mem.phase is Phase.STOPPING:
        # The driver the operator stopped (spec edit) exited, and the kubelet reported the pod
        # Succeeded/Failed before it removed it: a stop asked for, not a crash. Wait for it.
        return Plan(mem, [], 2.0)
    if pod is not None and pod.phase in ("Pending", "Running"):
        if pod.deleting_since is not None:
            return Plan(replace(mem, phase=Phase.STOPPING), [], 2.0)
        # 6. spec change: stop at a batch boundary, relaunch when gone; never while the spec
        # is refused (``spec_error``: ``spec`` is the last good one, standing in)
        if obs.spec_error is None and _spec_changed(pod, obs):
            return Plan(
                replace(
                    mem,
                    phase=Phase.STOPPING,
                    reason="SpecChanged",
                    message="spec changed: restarting the driver at a batch boundary",
                ),
                [
                    Action(Kind.DELETE_POD, pod=pod.name, reason="SpecChanged"),
                    _event("SpecChanged", f"restarting {pod.name} for generation {obs.generation}"),
                ],
                2.0,
            )
        # 7. a driver that does not start
        start_timeout = spec.restart_policy.start_timeout_seconds
        if (
            pod.phase == "Pending"
            and pod.created_at is not None
            and obs.now - pod.created_at > timedelta(seconds=start_timeout)
        ):
            return _start_timeout(obs, spec, pod, rng)
        # 7b. a Running driver that makes no progress
        stalled = _no_progress_since(obs, spec, pod)
        if stalled is not None and mem.blocked is None:
            return _hung(obs, spec, pod, rng, *stalled)
        # 8. healthy
        phase = Phase.RUNNING if pod.phase == "Running" else Phase.STARTING
        restarts = mem.restarts
        if (
            phase is Phase.RUNNING
            and mem.last_failure is not None
            and obs.now - mem.last_failure > timedelta(seconds=spec.restart_policy.window_seconds)
        ):
            restarts = 0
        # Starting after a blocked Failed (rule 14): the driver was created, the block is over.
        reason = "Running" if phase is Phase.RUNNING else mem.reason
        # ... or after a disruption that held rule 2 (``_disrupted``): it is over.
        if phase is Phase.STARTING and (mem.phase is Phase.FAILED or reason == NODE_DISRUPTION):
            reason = "Launched"
        message, requeue = _healthy(pod, obs, stalled)
        return Plan(
            replace(
                mem,
                phase=phase,
                epoch=pod.epoch,
                restarts=restarts,
                reason=reason,
                message=message,
            ),
            [],
            requeue,
        )

    if pod is not None:
        return _after_exit(obs, spec, pod, rng)

    # no driver pod
    pending = (obs.annotation_epoch or 0) > (mem.epoch or 0)
    if mem.phase is Phase.RUNNING and mem.epoch is not None and not pending:
        # 11. it vanished (deleted, evicted) while we expected it to run
        return _failure(obs, spec, rng, "DriverDeleted", f"driver of epoch {mem.epoch} disappeared")
    if mem.failed_generation is not None and mem.failed_generation != obs.generation:
        # The spec was edited since the last failure: that edit is the user's fix, so it gets
        # a full restart budget and no wait for the old backoff.
        mem = replace(
            mem, restarts=0, last_failure=None, backoff_until=None, failed_generation=None
        )
    if mem.phase is Phase.FAILED and mem.failed_generation == obs.generation:
        return Plan(mem, [], 30.0)  # 12.
    if mem.backoff_until is not None and obs.now < mem.backoff_until:
        wait = (mem.backoff_until - obs.now).total_seconds()
        return Plan(replace(mem, phase=Phase.BACKOFF), [], max(0.5, wait))  # 13.
    reason = "Launch" if mem.epoch is None else "Relaunch"
    launch = _relaunch(obs, mem, reason, f"launching the driver with epoch {next_epoch(obs)}")
    return launch if mem.blocked is None else _blocked(obs, spec, mem.blocked, launch)


def _spec_changed(pod: DriverPod, obs: Observation) -> bool:
    """Rule 6: the pod's hash is neither the spec's nor, for a driver launched before the hash
    was narrowed, the old formula's hash of the same spec."""
    current = {obs.spec_hash, *obs.legacy_spec_hashes} - {""}
    return pod.spec_hash not in current


def _blocked(obs: Observation, spec: PipelineSpec, blocked: Blocked, launch: Plan) -> Plan:
    """Rule 14 while the environment refuses: retry, and say Failed after the start timeout.

    Not a counted failure (no driver ran) and not a permanent one (no failed generation): the
    fix is usually outside the spec (create the Secret, open the network), so the recovery and
    launch are retried every 10 s and the first success clears it.
    """
    if blocked.reason == FOREIGN_FENCE_OWNER:
        # Not a failure to count or time out: the normal state of the passive side of a DR
        # pair. Each retry only reads the fence (no epoch is reserved while it is foreign).
        memory = replace(
            launch.memory, phase=Phase.WAITING, reason=blocked.reason, message=blocked.message
        )
        return Plan(memory, launch.actions, 30.0)
    waited = obs.now - blocked.since
    limit = spec.restart_policy.start_timeout_seconds
    actions = _create_again(obs, blocked) or launch.actions
    # Every 10 s at first; a blocker that lasts is retried less often (at most every minute),
    # so that a quota full for hours does not cost the API server a write every 10 s.
    requeue = min(BLOCKED_RETRY_MAX, max(10.0, waited.total_seconds() / 10))
    if waited <= timedelta(seconds=limit):
        # The reason stays the launch's (the condition carries the blocker's): a pod created
        # on this retry must not start out with a stale blocker as its reason.
        memory = replace(launch.memory, message=f"{blocked.reason}: {blocked.message}; retrying")
        return Plan(memory, actions, requeue)
    message = (
        f"{blocked.message}; the pipeline has not started for {waited.total_seconds():.0f}s "
        f"(restartPolicy.startTimeoutSeconds {limit}); retrying"
    )
    memory = replace(launch.memory, phase=Phase.FAILED, reason=blocked.reason, message=message)
    first = [] if obs.memory.phase is Phase.FAILED else [_event(blocked.reason, message, True)]
    return Plan(memory, [*first, *actions], requeue)


def _create_again(obs: Observation, blocked: Blocked) -> list[Action]:
    """Only the driver's create again, with the epoch already recovered, when that create is
    what was refused (review operator-2 N9); [] otherwise.

    A refused create (HTTP 403: quota, an admission policy, RBAC) created nothing, so its epoch
    is not spent although status.epoch recorded it: no pod can carry it. Recovering again would
    reserve a new epoch, raise the fence and resolve on every retry (each with a ``Recovered``
    event), and the epoch would climb for as long as the quota stays full.
    """
    mem = obs.memory
    epoch = mem.epoch
    if (
        blocked.condition != DRIVER_CREATABLE
        or epoch is None
        or obs.driver is not None
        or mem.recovered_epoch != epoch
        or (obs.annotation_epoch or 0) != epoch
    ):
        return []
    return [Action(Kind.LAUNCH, epoch=epoch, reason="Relaunch")]


def _healthy(
    pod: DriverPod, obs: Observation, stalled: tuple[datetime, int] | None = None
) -> tuple[str, float]:
    """Status message and requeue of rule 8; a node that is not Ready (within the node-lost
    grace, or rule 2 would have applied) is said, and looked at again when the grace ends; so
    is a hung driver (rule 7b) held while the operator is blocked."""
    message = f"driver {pod.name} (epoch {pod.epoch}) is {pod.phase}"
    blocked = obs.memory.blocked
    if stalled is not None and blocked is not None:
        since, bound = stalled
        message = (
            f"{message}; no progress since {_stamp(since)} (restartPolicy.progressTimeoutSeconds "
            f"{bound}), not restarted while {blocked.reason}: its recovery needs what the "
            "operator cannot reach"
        )
    if not pod.node_problem or pod.node_problem_since is None:
        return message, 5.0
    deadline = pod.node_problem_since + obs.node_lost_grace
    left = (deadline - obs.now).total_seconds()
    # The deadline, not a countdown: status is written only when it changes, and a countdown
    # would write it on every pass of the grace.
    return (
        f"{message}; its node {pod.node} is {pod.node_problem}: the driver is replaced at "
        f"{deadline.strftime('%Y-%m-%dT%H:%M:%SZ')} unless the node recovers",
        min(5.0, max(0.5, left)),
    )


def _lost_because(pod: DriverPod, obs: Observation) -> str:
    """Why rule 2 applies to ``pod`` (the driver may be running where nobody can stop it), or "".

    * Its node has not been Ready for longer than the node-lost grace. Kubernetes never says
      more than that about a partitioned or dead node: the node lifecycle controller marks the
      node Ready=Unknown and the pod Ready=False, and a graceful delete stays Terminating for
      as long as the node is away. A process there may still run and write, which the fence
      makes harmless, so acting early is safe; the grace only rides out short blips.
    * It has been terminating for longer than its grace plus ``STUCK_TERMINATING_GRACE``.
    * Phase Unknown: deprecated and never set by the kubelet since 2015, but a pod that says
      it is of unknown state is not trusted either.

    A pod whose container has exited (Succeeded/Failed) runs nothing: its node does not matter.
    """
    if pod.node_problem and not pod.terminated:
        since = pod.node_problem_since
        if since is None:
            return f"its node {pod.node} is {pod.node_problem}"
        if obs.now - since > obs.node_lost_grace:
            seconds = (obs.now - since).total_seconds()
            return f"its node {pod.node} is {pod.node_problem} for {seconds:.0f}s"
    if _stuck(pod, obs.now):
        assert pod.deleting_since is not None
        seconds = (obs.now - pod.deleting_since).total_seconds()
        return f"terminating for {seconds:.0f}s, its grace is {pod.grace_seconds}s"
    if pod.phase == "Unknown":
        return "pod phase Unknown"
    return ""


def _disrupted(obs: Observation, pod: DriverPod, why: str) -> Plan:
    """Rule 2 held by the disruption guard (``disruption``): no fence, no force-delete, no launch.

    The driver may well be running and writing; its node is only unheard of, as most nodes are.
    The phase stays what it was; the reason says why nothing is done, once as a Warning event,
    and the pass looks again every 10 s: as soon as the disruption ends (or shrinks to a lost
    node), rule 2 acts on the grace it already counted.
    """
    mem = obs.memory
    message = (
        f"driver {pod.name} would be replaced ({why}), but {obs.node_disruption}: it is neither "
        "fenced nor replaced while that lasts"
    )
    first = mem.reason != NODE_DISRUPTION
    memory = replace(mem, reason=NODE_DISRUPTION, message=message)
    return Plan(memory, [_event(NODE_DISRUPTION, message, warning=True)] if first else [], 10.0)


def _lost(obs: Observation, spec: PipelineSpec, pod: DriverPod, why: str) -> Plan:
    """Rule 2: fence the lost driver, force-delete it, launch the next one (not under suspend).

    The lost pod is recorded as the last failure: while its recovery is retried (sink down,
    Secret missing) the pod is still observed, and it is counted only once. Under suspend the
    user asked for no driver: nothing is launched and nothing counted.
    """
    mem = obs.memory
    epoch = next_epoch(obs)
    message = f"driver {pod.name} is lost ({why}); fenced it with epoch {epoch}"
    actions = [
        Action(Kind.RECOVER, epoch=epoch, reason="DriverLost"),
        Action(Kind.FORCE_DELETE_POD, pod=pod.name, reason="DriverLost"),
    ]
    if spec.suspend:
        memory = replace(mem, phase=Phase.SUSPENDED, reason="DriverLost", message=message)
        return Plan(memory, [*actions, _event("DriverLost", message, warning=True)], 2.0)
    counted = mem.failure is not None and mem.failure.pod == pod.name
    memory = replace(
        mem,
        phase=Phase.RECOVERING,
        restarts=mem.restarts if counted else _count_restart(spec, mem, obs.now),
        last_failure=mem.last_failure if counted else obs.now,
        failed_generation=obs.generation,
        reason="DriverLost",
        message=message,
        failure=mem.failure if counted else Failure(pod.name, LOST, None, why, obs.now),
    )
    actions.append(Action(Kind.LAUNCH, epoch=epoch, reason="DriverLost"))
    if not counted:
        actions.append(_event("DriverLost", message, warning=True))
    return Plan(memory, actions, requeue_seconds=2.0)


def _stuck(pod: DriverPod, now: datetime) -> bool:
    if pod.deleting_since is None:
        return False
    return now - pod.deleting_since > timedelta(seconds=pod.grace_seconds) + STUCK_TERMINATING_GRACE


def _count_restart(spec: PipelineSpec, mem: Memory, now: datetime) -> int:
    window = timedelta(seconds=spec.restart_policy.window_seconds)
    if mem.last_failure is not None and now - mem.last_failure > window:
        return 1
    return mem.restarts + 1


def _stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _no_progress_since(
    obs: Observation, spec: PipelineSpec, pod: DriverPod
) -> tuple[datetime, int] | None:
    """Rule 7b's verdict on a Running driver: (its last progress, the bound) when that is older
    than ``progress_timeout``, else None.

    Progress is the newest of what the operator saw (``Observation.progress``) and the driver's
    launch (``status.lastLaunchTime``, the pod's creation), so a driver still starting has the
    whole bound from its launch. Not judged: a driver whose endpoint never answered this
    operator process (``progress`` None: after an operator restart or a leader change, the
    clock resumes only from the driver's own heartbeat, never from what no one watched), and a
    driver whose node is not Ready (rule 2 and its disruption guard decide about it).
    """
    bound = progress_timeout(spec)
    if bound is None or obs.progress is None or pod.phase != "Running" or pod.node_problem:
        return None
    seen = (obs.progress, obs.memory.last_launch, pod.created_at)
    since = max(t for t in seen if t is not None)
    if obs.now - since <= timedelta(seconds=bound):
        return None
    return since, bound


def _hung(
    obs: Observation,
    spec: PipelineSpec,
    pod: DriverPod,
    rng: random.Random,
    since: datetime,
    bound: int,
) -> Plan:
    """Rule 7b: the failure path of rule 7 (delete, count, back off, recover, relaunch).

    The pod is deleted gracefully, so its kubelet kills whatever still runs; the relaunch
    raises the fence first, so a batch the old driver still completes is refused.
    """
    age = (obs.now - since).total_seconds()
    unset = spec.restart_policy.progress_timeout_seconds is None
    short = (
        f"no trigger, decided batch or launch for {age:.0f}s (since {_stamp(since)}); "
        f"restartPolicy.progressTimeoutSeconds is {bound}{' (unset: the default)' if unset else ''}"
    )
    message = (
        f"driver {pod.name} (epoch {pod.epoch}) is hung: {short}. It is deleted and relaunched "
        "with a new epoch, fenced against anything it still runs; if batches legitimately take "
        "this long, raise restartPolicy.progressTimeoutSeconds"
    )
    failure = Failure(pod.name, HUNG, None, short, obs.now)
    plan_ = _failure(obs, spec, rng, HUNG, message, failure)
    actions = [Action(Kind.DELETE_POD, pod=pod.name, reason=HUNG), *plan_.actions]
    if plan_.memory.reason != HUNG:  # CrashLoop: its event still says why
        actions.append(_event(HUNG, message, warning=True))
    return Plan(plan_.memory, actions, plan_.requeue_seconds)


def _start_timeout(
    obs: Observation, spec: PipelineSpec, pod: DriverPod, rng: random.Random
) -> Plan:
    """Rule 7: the pod is deleted and the failure counted, with the reason it waits for."""
    why = pod.reason or "Pending"
    seconds = spec.restart_policy.start_timeout_seconds
    message = f"driver {pod.name} did not start within {seconds}s: {why}" + (
        f": {pod.message}" if pod.message else ""
    )
    failure = Failure(pod.name, why, None, pod.message[:1000], obs.now)
    plan_ = _failure(obs, spec, rng, "StartTimeout", message, failure)
    actions = [Action(Kind.DELETE_POD, pod=pod.name, reason="StartTimeout"), *plan_.actions]
    if plan_.memory.reason != "StartTimeout":  # CrashLoop: its event still says why
        actions.append(_event("StartTimeout", message, warning=True))
    return Plan(plan_.memory, actions, plan_.requeue_seconds)


def _after_exit(obs: Observation, spec: PipelineSpec, pod: DriverPod, rng: random.Random) -> Plan:
    """The driver container has terminated (pod Succeeded or Failed); a failed one is kept."""
    mem = obs.memory
    code = pod.exit_code
    if code == EXIT_FENCED:  # 10.
        plan_ = _relaunch(
            obs,
            mem,
            "DriverFenced",
            f"driver {pod.name} found itself fenced; relaunching above the fence",
        )
        delete = Action(Kind.DELETE_POD, pod=pod.name, reason="Exited")
        return Plan(plan_.memory, [delete, *plan_.actions], plan_.requeue_seconds)
    line = last_line(pod.message)
    failure = Failure(pod.name, pod.reason or f"Pod{pod.phase}", code, line, obs.now)
    said = f"driver {pod.name} exited with code {code} ({failure.reason})" + (
        f": {line}" if line else ""
    )
    if code in PERMANENT:  # 9.
        reason = PERMANENT[code]
        message = f"{said}; {reason}: fix the cause and change the spec (any edit) to retry"
        return Plan(
            replace(
                mem,
                phase=Phase.FAILED,
                reason=reason,
                message=message,
                failed_generation=obs.generation,
                failure=failure,
            ),
            [_event(reason, message, warning=True)],
            30.0,
        )
    return _failure(obs, spec, rng, "DriverFailed", said, failure)  # 11.


def _failure(
    obs: Observation,
    spec: PipelineSpec,
    rng: random.Random,
    reason: str,
    message: str,
    failure: Failure | None = None,
) -> Plan:
    mem = replace(obs.memory, failure=failure or obs.memory.failure)
    restarts = _count_restart(spec, mem, obs.now)
    if restarts > spec.restart_policy.max_restarts:
        text = (
            f"{message}; {restarts - 1} restarts within "
            f"{spec.restart_policy.window_seconds}s exceed maxRestarts "
            f"{spec.restart_policy.max_restarts}"
        )
        return Plan(
            replace(
                mem,
                phase=Phase.FAILED,
                restarts=restarts,
                last_failure=obs.now,
                reason="CrashLoop",
                message=text,
                failed_generation=obs.generation,
            ),
            [_event("CrashLoop", text, warning=True)],
            30.0,
        )
    delay = backoff_seconds(spec, restarts, rng)
    until = obs.now + timedelta(seconds=delay)
    text = f"{message}; restart {restarts} in {delay:.0f}s"
    return Plan(
        replace(
            mem,
            phase=Phase.BACKOFF,
            restarts=restarts,
            last_failure=obs.now,
            backoff_until=until,
            failed_generation=obs.generation,
            reason=reason,
            message=text,
        ),
        [_event(reason, text, warning=True)],
        delay,
    )
