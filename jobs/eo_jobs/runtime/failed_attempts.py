"""Roll back what a failed writer-task attempt left prepared, as soon as Spark reports it.

A writer task can fail after its PREPARE (the Python worker dies, the result is lost on the
way back, an injected fault). Spark then retries the task, and the retry writes the same keys:
on an upsert, or on a table with a unique index, it waits on the failed attempt's prepared row
locks until ``lock_timeout``, and so does every later retry, so the batch fails. The failed
attempt's result can never be used (Spark only hands the driver results of successful
attempts, and the decision names only those), so its gid is safe to roll back at once. This
listener does that on Spark's ``onTaskEnd`` for every attempt that did not succeed, through its
own connections (it runs on a Py4J callback thread, beside the driver's own work).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from pyspark import SparkContext
from pyspark.java_gateway import ensure_callback_server_started

from eo_jobs.protocol.xa import PreparedTransactions
from eo_jobs.runtime.task import WriterTask

log = logging.getLogger("eo.attempts")


class FailedAttempts:
    """A Spark listener (``SparkListenerInterface`` through Py4J) for writer-task failures.

    Spark calls every method of the interface; all but ``onTaskEnd`` are no-ops, served by
    ``__getattr__`` so a newer Spark with more events does not break it.
    """

    def __init__(self, dsns: Mapping[str, str]) -> None:
        self._stores = {sink: PreparedTransactions(dsn) for sink, dsn in dsns.items()}
        self._lock = threading.Lock()
        self._tasks: list[WriterTask] = []
        self.rolled_back: list[str] = []

    def watch(self, task: WriterTask) -> None:
        """``task``'s writer tasks are about to run (a failed attempt names its gid)."""
        with self._lock:
            self._tasks.append(task)

    def clear(self) -> None:
        """The batch is over; what is still prepared is the coordinator's to resolve."""
        with self._lock:
            self._tasks.clear()

    def onTaskEnd(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        """Roll back the gid of a writer-task attempt that did not succeed."""
        try:
            self._task_end(event)
        except Exception:  # a listener must never break Spark's listener bus
            log.exception("could not roll back a failed writer-task attempt")

    def _task_end(self, event: Any) -> None:
        if event.reason().getClass().getSimpleName() == "Success$":
            return
        with self._lock:
            watched = list(self._tasks)
        info = event.taskInfo()
        for task in watched:
            gid = task.gid(int(info.index()), int(info.taskId()))
            outcome = self._stores[task.sink].rollback(gid)
            self.rolled_back.append(gid)
            log.warning("writer task attempt %s failed: %s", gid, outcome.value)

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("on"):
            return lambda *_args: None
        raise AttributeError(name)

    def close(self) -> None:
        """Close the listener's connections."""
        for store in self._stores.values():
            store.close()

    class Java:
        """Py4J: this object implements Spark's listener interface."""

        implements: ClassVar[list[str]] = ["org.apache.spark.scheduler.SparkListenerInterface"]


def register(context: SparkContext, listener: FailedAttempts) -> None:
    """Add ``listener`` to Spark's listener bus."""
    # No public API adds a Python SparkListener; PySpark's own streaming listener does this.
    ensure_callback_server_started(context._gateway)  # type: ignore[no-untyped-call]
    context._jsc.sc().addSparkListener(listener)
