"""Roll back what a failed writer-task attempt left prepared, as soon as Spark reports it.

A writer task can fail after its PREPARE (the Python worker dies, the result is lost on the
way back, an injected fault). Spark then retries the task, and the retry writes the same keys:
on an upsert, or on a table with a unique index, it waits on the failed attempt's prepared row
locks until ``lock_timeout``, and so does every later retry, so the batch fails. A failed
attempt's result is never used (the driver only gets results of successful attempts, and the
decision names only those), so its gid is safe to roll back at once.

While a sink's writer job runs (tagged with a Spark job tag), a thread polls Spark's own status
store (the one behind the UI and the status tracker; no UI needed) for attempts that ended
FAILED or KILLED, and rolls their gids back through its own connections. Polling costs a few
Py4J calls per half second; a Python ``SparkListener`` would cost a Py4J round trip for every
event of every job (measured: a quarter of the batch time).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
from pyspark import SparkContext

from eo_jobs.protocol.databases import participant_store
from eo_jobs.runtime.task import WriterTask

log = logging.getLogger("eo.attempts")

POLL_SECONDS = 0.5
ENDED_BADLY = ("FAILED", "KILLED")


def stage_attempts(store: Any, stage: int) -> range:
    """The attempt numbers of ``stage`` in Spark's status store so far.

    A job lists all its stage ids when it starts, but a stage enters the store only when it is
    submitted (a shuffle's reduce stage waits for its map stage; a skipped stage never does):
    the store then raises NoSuchElementException ("No stage with id N"). Such a stage has no
    attempt yet, and the next poll sees it once it has one.
    """
    try:
        return range(store.lastStageAttempt(stage).attemptId() + 1)
    except Py4JJavaError as exc:
        if exc.java_exception.getClass().getName() == "java.util.NoSuchElementException":
            return range(0)
        raise


class FailedAttempts:
    """Rolls back the gids of failed writer-task attempts while their job runs."""

    def __init__(self, context: SparkContext, dsns: Mapping[str, str]) -> None:
        self._context = context
        self._stores = {sink: participant_store(dsn) for sink, dsn in dsns.items()}
        self._seen: set[int] = set()
        self.rolled_back: list[str] = []

    @contextlib.contextmanager
    def watching(self, task: WriterTask) -> Iterator[None]:
        """Watch the Spark jobs started inside the block: they write ``task``'s sink."""
        tag = f"eo-writer-{task.sink}-{task.batch_id}"
        self._context.addJobTag(tag)
        stop = threading.Event()
        poller = threading.Thread(
            target=self._poll, args=(task, tag, stop), name="eo-failed-attempts", daemon=True
        )
        poller.start()
        try:
            yield
        finally:
            stop.set()
            poller.join()
            self._context.removeJobTag(tag)

    def _poll(self, task: WriterTask, tag: str, stop: threading.Event) -> None:
        # The first look waits a period: when the block starts its job has no attempts yet,
        # and a sweep is a few Py4J calls on the batch's critical path.
        while not stop.wait(POLL_SECONDS):
            try:
                self._sweep(task, tag)
            except Exception:  # the batch itself must not fail because of this helper
                log.exception("could not check writer-task attempts")

    def _sweep(self, task: WriterTask, tag: str) -> None:
        jvm_context: Any = self._context._jsc.sc()
        tracker = jvm_context.statusTracker()
        store = jvm_context.statusStore()
        for job in tracker.getJobIdsForTag(tag):
            info = tracker.getJobInfo(job)
            if info.isEmpty():
                continue
            for stage in info.get().stageIds():
                for attempt in stage_attempts(store, stage):
                    self._roll_back_failed(task, store.taskList(stage, attempt, 1_000_000))

    def _roll_back_failed(self, task: WriterTask, tasks: Any) -> None:
        for i in range(tasks.size()):
            data = tasks.apply(i)
            task_id = int(data.taskId())
            if data.status() not in ENDED_BADLY or task_id in self._seen:
                continue
            self._seen.add(task_id)
            # The partition, as the writer task names its gid: ``index`` is the position in
            # the task set, which a resubmitted stage fills with only its missing partitions.
            gid = task.gid(int(data.partitionId()), task_id)
            outcome = self._stores[task.sink].rollback(gid)
            self.rolled_back.append(gid)
            log.warning("writer task attempt %s %s: %s", gid, data.status().lower(), outcome.value)

    def close(self) -> None:
        """Close the connections."""
        for store in self._stores.values():
            store.close()
