"""kopf wiring only: one reconcile loop (daemon) per pipeline, pod events wake it up.

Every decision is made by ``planner`` through ``reconciler``; here events are translated into
"reconcile this pipeline now", and deletion runs the finalizer (stop the driver, fence, resolve
every in-doubt transaction) before kopf lets the object go.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import kopf

from eo_jobs.spec.models import GROUP, PLURAL, VERSION
from eo_operator.deletion import CleanupPending
from eo_operator.reconciler import Reconciler, RetrySoon
from eo_operator.resources import LABEL_PIPELINE, MANAGED_BY

log = logging.getLogger("eo.operator")


class Wakeups:
    """One event per pipeline, set by pod events to cut a reconcile wait short."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[tuple[str, str], threading.Event] = {}

    def get(self, key: tuple[str, str]) -> threading.Event:
        """The event of a pipeline (created on first use)."""
        with self._lock:
            return self._events.setdefault(key, threading.Event())

    def drop(self, key: tuple[str, str]) -> None:
        """Forget a deleted pipeline."""
        with self._lock:
            self._events.pop(key, None)


def register(registry: kopf.OperatorRegistry, reconciler: Reconciler) -> None:
    """Attach the handlers to ``registry``."""
    wakeups = Wakeups()

    @kopf.daemon(
        GROUP, VERSION, PLURAL, registry=registry, cancellation_timeout=30.0, id="reconcile"
    )
    def pipeline_loop(
        namespace: str | None, name: str, stopped: kopf.DaemonStopped, **_: Any
    ) -> None:
        assert namespace is not None
        key = (namespace, name)
        wake = wakeups.get(key)
        while not stopped:
            wake.clear()
            try:
                with reconciler.metrics.reconcile_timer("reconcile"):
                    delay = reconciler.reconcile(namespace, name)
            except RetrySoon as exc:
                log.info("%s/%s: %s", namespace, name, exc)
                delay = 1.0
            except Exception:
                log.exception("%s/%s: reconcile failed; retrying", namespace, name)
                delay = 5.0
            deadline = time.monotonic() + delay
            while not stopped and not wake.is_set() and time.monotonic() < deadline:
                wake.wait(min(0.5, max(0.0, deadline - time.monotonic())))

    @kopf.on.event("", "v1", "pods", registry=registry, labels={MANAGED_BY: "eo"})
    def driver_pod_changed(namespace: str | None, labels: Mapping[str, str], **_: Any) -> None:
        pipeline = labels.get(LABEL_PIPELINE)
        if pipeline and namespace:
            wakeups.get((namespace, pipeline)).set()

    @kopf.on.delete(GROUP, VERSION, PLURAL, registry=registry, id="finalize")
    def finalize(namespace: str | None, name: str, **_: Any) -> None:
        assert namespace is not None
        with reconciler.metrics.reconcile_timer("delete"):
            try:
                summary = reconciler.finalize(namespace, name)
            except CleanupPending as exc:
                raise kopf.TemporaryError(str(exc), delay=exc.delay) from exc
        wakeups.drop((namespace, name))
        log.info("%s/%s deleted: %s", namespace, name, summary)
