"""Phase 2 of batch N in the background, while Spark logs N and plans N + 1.

Once batch N's decision is durable its outcome is fixed: committing its prepared participants
only makes it visible, and recovery does the same by the decision if this driver dies first
(the operator's, or the next driver's start-up). So ``foreachBatch`` returns right after the
decision and phase 2 runs on a thread of its own, off the batch's critical path: it overlaps
the commit log Spark writes for N and the planning of N + 1 (~140 ms between two batches, where
phase 2 takes ~9 ms at 200,000 rows per batch).

Batch N + 1 starts by waiting for it, so there is one phase 2 at a time, in batch order, and
no two threads ever share the protocol's connections.

A phase 2 that fails (a sink down for longer than a reconnect, a gid busy for long) is retried
on its thread with capped exponential backoff: it is idempotent (a finished gid answers by its
marker), and until it succeeds the batch's rows stay invisible and its row locks held, which on
an idle stream could otherwise last until new input arrives. Each failure is logged at once
(logger ``eo.phase2``). Past ``EO_PHASE_TWO_RETRY_SECONDS`` the thread gives up: the failure
is raised by the next wait (the next batch's start, or the end of the query) and ``on_give_up``
is called so that the driver stops an idle query too; it then exits non-zero and recovery (the
operator's, or the next driver's start-up) commits the batch by its decision. A failure is
never dropped.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger("eo.phase2")

RETRY_ENV = "EO_PHASE_TWO_RETRY_SECONDS"
DEFAULT_RETRY_SECONDS = 300.0
"""How long a failing phase 2 is retried before the driver gives up and exits: long enough to
ride out a sink's restart or failover, short enough that a batch does not stay invisible (and
its keys locked) for long before recovery takes over."""
FIRST_DELAY_SECONDS = 0.5
MAX_DELAY_SECONDS = 30.0


def retry_seconds_from_env() -> float:
    """The retry bound: ``$EO_PHASE_TWO_RETRY_SECONDS``, else the default."""
    text = os.environ.get(RETRY_ENV)
    if text is None or not text.strip():
        return DEFAULT_RETRY_SECONDS
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{RETRY_ENV} must be a number of seconds, not {text!r}") from None
    if value < 0:
        raise ValueError(f"{RETRY_ENV} must not be negative, not {text!r}")
    return value


class PhaseTwoError(RuntimeError):
    """Phase 2 of a decided batch failed; its decision stands and recovery will finish it."""

    def __init__(self, batch_id: int, cause: BaseException, attempts: int = 1) -> None:
        tried = f" {attempts} times" if attempts > 1 else ""
        super().__init__(
            f"phase 2 of batch {batch_id} failed after its decision was recorded{tried} "
            f"({type(cause).__name__}: {cause}); the decision is durable, so recovery (the "
            "operator's, or the next driver's start-up) commits the batch's prepared transactions"
        )
        self.batch_id = batch_id
        self.attempts = attempts


class PhaseTwo:
    """At most one phase 2 running, started by one thread (Spark's batch thread)."""

    def __init__(self, retry_seconds: float | None = None) -> None:
        self.retry_seconds = retry_seconds_from_env() if retry_seconds is None else retry_seconds
        self.on_give_up: Callable[[PhaseTwoError], None] = lambda _failure: None
        """Called on phase 2's thread when it gives up (the driver stops its query then)."""
        self._thread: threading.Thread | None = None
        self._failure: PhaseTwoError | None = None
        self._sleep = threading.Event()  # never set: an interruptible sleep

    def start(self, batch_id: int, work: Callable[[], None]) -> None:
        """Run ``work`` (batch ``batch_id``'s phase 2) in the background, after the last one."""
        self.wait()

        def run() -> None:
            failure = self._attempts(batch_id, work)
            if failure is not None:  # handed to the next wait(), which raises it
                self._failure = failure
                self.on_give_up(failure)

        self._thread = threading.Thread(target=run, name=f"eo-phase-2-{batch_id}", daemon=True)
        self._thread.start()

    def _attempts(self, batch_id: int, work: Callable[[], None]) -> PhaseTwoError | None:
        """Run ``work`` until it succeeds or ``retry_seconds`` have passed; the last failure."""
        deadline = time.monotonic() + self.retry_seconds
        delay = FIRST_DELAY_SECONDS
        attempt = 1
        while True:
            try:
                work()
            except Exception as exc:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    failure = PhaseTwoError(batch_id, exc, attempt)
                    failure.__cause__ = exc
                    log.error(
                        "phase 2 of batch %s still failing after %d attempts in %.0fs; "
                        "stopping the query so that recovery commits the batch: %s: %s",
                        batch_id,
                        attempt,
                        self.retry_seconds,
                        type(exc).__name__,
                        exc,
                        extra={"batch": batch_id, "attempt": attempt, "giving_up": True},
                    )
                    return failure
                wait = min(delay, remaining)
                log.warning(
                    "phase 2 of batch %s failed (attempt %d; its rows stay invisible until it "
                    "succeeds), retrying in %.1fs: %s: %s",
                    batch_id,
                    attempt,
                    wait,
                    type(exc).__name__,
                    exc,
                    extra={"batch": batch_id, "attempt": attempt, "retry_in": round(wait, 3)},
                )
                self._sleep.wait(wait)
                delay = min(delay * 2, MAX_DELAY_SECONDS)
                attempt += 1
                continue
            if attempt > 1:
                log.warning(
                    "phase 2 of batch %s succeeded at attempt %d",
                    batch_id,
                    attempt,
                    extra={"batch": batch_id},
                )
            return None

    def wait(self) -> None:
        """Block until the running phase 2 ends; raise its failure, once."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure
