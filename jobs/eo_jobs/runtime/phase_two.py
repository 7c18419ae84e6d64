"""Phase 2 of batch N in the background, while Spark logs N and plans N + 1.

Once batch N's decision is durable its outcome is fixed: committing its prepared participants
only makes it visible, and recovery does the same by the decision if this driver dies first
(the operator's, or the next driver's start-up). So ``foreachBatch`` returns right after the
decision and phase 2 runs on a thread of its own, off the batch's critical path: it overlaps
the commit log Spark writes for N and the planning of N + 1 (~140 ms between two batches, where
phase 2 takes ~9 ms at 200,000 rows per batch).

Batch N + 1 starts by waiting for it, so there is one phase 2 at a time, in batch order, and
no two threads ever share the protocol's connections. A phase 2 that failed is raised by that
wait (the query fails; the next driver's recovery commits the batch), or by the final wait when
the query ends, so a failure is never dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class PhaseTwoError(RuntimeError):
    """Phase 2 of a decided batch failed; its decision stands and recovery will finish it."""

    def __init__(self, batch_id: int, cause: BaseException) -> None:
        super().__init__(
            f"phase 2 of batch {batch_id} failed after its decision was recorded "
            f"({type(cause).__name__}: {cause}); the decision is durable, so recovery (the "
            "operator's, or the next driver's start-up) commits the batch's prepared transactions"
        )
        self.batch_id = batch_id


class PhaseTwo:
    """At most one phase 2 running, started by one thread (Spark's batch thread)."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._failure: PhaseTwoError | None = None

    def start(self, batch_id: int, work: Callable[[], None]) -> None:
        """Run ``work`` (batch ``batch_id``'s phase 2) in the background, after the last one."""
        self.wait()

        def run() -> None:
            try:
                work()
            except Exception as exc:  # handed to the next wait(), which raises it
                failure = PhaseTwoError(batch_id, exc)
                failure.__cause__ = exc
                self._failure = failure

        self._thread = threading.Thread(target=run, name=f"eo-phase-2-{batch_id}", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Block until the running phase 2 ends; raise its failure, once."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure
