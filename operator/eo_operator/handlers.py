"""kopf wiring only: one async reconcile loop (daemon) per pipeline, events wake it up.

Every decision is made by ``planner`` through ``reconciler``; here events are translated into
"reconcile this pipeline now", and deletion runs the finalizer (stop the driver, fence, resolve
every in-doubt transaction) before kopf lets the object go.

Why async: a sync kopf daemon holds a thread of kopf's executor for the pipeline's whole life,
and that executor has min(32, cores + 4) threads, so past that many pipelines new ones were
never reconciled and the pod-event and delete handlers queued behind the daemons forever. Here
every handler is a coroutine on kopf's event loop: a pipeline's loop costs a task, not a
thread, and only the blocking part of a pass (Kubernetes and sink calls) runs in a bounded
executor (``--workers``). Deletions run in an executor of their own, so a delete never waits
behind reconcile passes of other pipelines (nor a pass behind a slow deletion).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import kopf

from eo_jobs.spec.models import GROUP, PLURAL, VERSION
from eo_operator.deletion import CleanupPending
from eo_operator.reconciler import Reconciler, RetrySoon
from eo_operator.resources import LABEL_PIPELINE, MANAGED_BY

log = logging.getLogger("eo.operator")

DEFAULT_WORKERS = 32
"""Reconcile passes that run at once (threads). A pass mostly waits on the API server and
PostgreSQL, so throughput grows with threads: on a loaded 2-core machine 8 left 1,000
pipelines' views 69 s old at p95, 32 kept it at 18 s (bench/operator_scale.py, bench/README.md).
At most this many passes hold sink connections at once."""


@dataclass
class Executors:
    """The bounded thread pools the blocking work of the handlers runs in."""

    workers: int = DEFAULT_WORKERS
    reconcile: ThreadPoolExecutor = field(init=False)
    finalize: ThreadPoolExecutor = field(init=False)

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers}")
        self.reconcile = ThreadPoolExecutor(self.workers, thread_name_prefix="eo-reconcile")
        # A deletion can wait up to a driver's grace period plus the sink clean-up: several at
        # once must not use up the reconcile threads, and none may wait behind them.
        self.finalize = ThreadPoolExecutor(
            max(2, self.workers // 2), thread_name_prefix="eo-finalize"
        )

    def shutdown(self) -> None:
        """Stop accepting work (running passes finish on their own threads)."""
        self.reconcile.shutdown(wait=False, cancel_futures=True)
        self.finalize.shutdown(wait=False, cancel_futures=True)


class Wakeups:
    """One asyncio event per pipeline, set by events to cut a reconcile wait short.

    Every handler is a coroutine on kopf's loop, so the events are only touched from that
    loop's thread (no lock needed).
    """

    def __init__(self) -> None:
        self._events: dict[tuple[str, str], asyncio.Event] = {}
        self._generations: dict[tuple[str, str], int] = {}

    def get(self, key: tuple[str, str]) -> asyncio.Event:
        """The event of a pipeline (created on first use)."""
        return self._events.setdefault(key, asyncio.Event())

    def wake(self, key: tuple[str, str]) -> None:
        """Reconcile the pipeline now (if its loop is waiting)."""
        self.get(key).set()

    def spec_changed(self, key: tuple[str, str], generation: int) -> bool:
        """True the first time ``generation`` of the pipeline is seen past the first one.

        Status writes (the operator's own, on every change) do not bump the generation, so
        they do not wake the loop that made them; a user's spec edit does.
        """
        before = self._generations.get(key)
        self._generations[key] = generation
        return before is not None and generation != before

    def drop(self, key: tuple[str, str]) -> None:
        """Forget a deleted pipeline."""
        self._events.pop(key, None)
        self._generations.pop(key, None)


def _reconcile_pass(reconciler: Reconciler, namespace: str, name: str) -> float:
    """One timed pass (on an executor thread); returns the seconds until the next one."""
    try:
        with reconciler.metrics.reconcile_timer("reconcile"):
            return reconciler.reconcile(namespace, name)
    except RetrySoon as exc:
        log.info("%s/%s: %s", namespace, name, exc)
        return 1.0
    except Exception:
        log.exception("%s/%s: reconcile failed; retrying", namespace, name)
        return 5.0


def _finalize(reconciler: Reconciler, namespace: str, name: str) -> str:
    with reconciler.metrics.reconcile_timer("delete"):
        return reconciler.finalize(namespace, name)


async def _pass_unless_stopped(
    executors: Executors,
    reconciler: Reconciler,
    namespace: str,
    name: str,
    stopped: kopf.DaemonStopped,
) -> float | None:
    """One pass on the executor; None when the daemon was stopped first (deletion).

    With many pipelines a pass may wait in the executor's queue; a deleted pipeline's daemon
    must not wait there too (kopf keeps the finalizer until every daemon has exited), so it
    leaves at once: a pass still queued never runs, one already running finishes on its
    thread (it sees the deletion and does not launch).
    """
    loop = asyncio.get_running_loop()
    work = loop.run_in_executor(executors.reconcile, _reconcile_pass, reconciler, namespace, name)
    stop: asyncio.Future[Any] = asyncio.ensure_future(stopped.wait())
    try:
        await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    if work.done():
        return work.result()
    work.cancel()
    return None


async def _sleep_or_wake(wake: asyncio.Event, stopped: kopf.DaemonStopped, delay: float) -> None:
    """Wait ``delay`` seconds, less when the pipeline is woken or its daemon stopped."""
    waits = {
        asyncio.ensure_future(wake.wait()),
        asyncio.ensure_future(stopped.wait()),
    }
    try:
        await asyncio.wait(waits, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()


def register(registry: kopf.OperatorRegistry, reconciler: Reconciler, executors: Executors) -> None:
    """Attach the handlers to ``registry``; blocking work goes to ``executors``."""
    wakeups = Wakeups()

    @kopf.daemon(
        GROUP, VERSION, PLURAL, registry=registry, cancellation_timeout=30.0, id="reconcile"
    )
    async def pipeline_loop(
        namespace: str | None, name: str, stopped: kopf.DaemonStopped, **_: Any
    ) -> None:
        assert namespace is not None
        wake = wakeups.get((namespace, name))
        while not stopped:
            wake.clear()
            delay = await _pass_unless_stopped(executors, reconciler, namespace, name, stopped)
            if delay is None or stopped:
                return
            await _sleep_or_wake(wake, stopped, delay)

    @kopf.on.event("", "v1", "pods", registry=registry, labels={MANAGED_BY: "eo"})
    async def driver_pod_changed(
        namespace: str | None, labels: Mapping[str, str], **_: Any
    ) -> None:
        pipeline = labels.get(LABEL_PIPELINE)
        if pipeline and namespace:
            wakeups.wake((namespace, pipeline))

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def pipeline_changed(
        namespace: str | None, name: str, meta: Mapping[str, Any], type: str | None, **_: Any
    ) -> None:
        if not namespace:
            return
        if type == "DELETED":
            wakeups.drop((namespace, name))  # also when it went without the finalizer running
            return
        # A spec edit (suspend, resume, a fix) is planned at once, not at the next requeue:
        # an idle pipeline's loop may wait up to Settings.max_requeue.
        if wakeups.spec_changed((namespace, name), int(meta.get("generation", 1))):
            wakeups.wake((namespace, name))

    @kopf.on.delete(GROUP, VERSION, PLURAL, registry=registry, id="finalize")
    async def finalize(namespace: str | None, name: str, **_: Any) -> None:
        assert namespace is not None
        loop = asyncio.get_running_loop()
        try:
            summary = await loop.run_in_executor(
                executors.finalize, _finalize, reconciler, namespace, name
            )
        except CleanupPending as exc:
            raise kopf.TemporaryError(str(exc), delay=exc.delay) from exc
        wakeups.drop((namespace, name))
        log.info("%s/%s deleted: %s", namespace, name, summary)
