"""Roll back stragglers while the stream is idle.

``FailedAttempts`` rolls back failed writer-task attempts while their job runs, and phase 2
rolls back a decided batch's losers; a task that PREPAREs after both (killed after its last
row when the job aborted, an executor declared lost that still runs) escapes them. The next
batch's ``begin`` rolls it back, but on an idle stream no next batch comes, and it holds its
row locks meanwhile (an upsert on the same keys then waits ``lock_timeout``), while the sweep
leaves the live epoch's transactions alone. So at idle triggers (the listener's
``onQueryIdle``), at most every ``REAP_SECONDS``, the driver rolls back the participants of its
decided batches that their decision does not name (``Coordinator.roll_back_stragglers``), on a
thread and connections of its own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from eo_jobs.protocol.coordinator import Coordinator

log = logging.getLogger("eo.stragglers")

REAP_SECONDS = 10.0


class IdleReaper:
    """Rolls back stragglers of decided batches, at most every ``every`` seconds, when idle."""

    def __init__(
        self, coordinator: Coordinator, query_id: Callable[[], str], every: float = REAP_SECONDS
    ) -> None:
        self._coordinator = coordinator.with_own_connections()
        self._query_id = query_id
        self.every = every
        self._busy = threading.Lock()
        self._last = float("-inf")
        self.rolled_back: list[str] = []

    def idle(self) -> None:
        """A trigger found no input: reap in the background unless done lately or running."""
        now = time.monotonic()
        if now - self._last < self.every or not self._busy.acquire(blocking=False):
            return
        self._last = now
        threading.Thread(target=self._reap, name="eo-stragglers", daemon=True).start()

    def _reap(self) -> None:
        try:
            undone = self._coordinator.roll_back_stragglers(self._query_id())
        except Exception:  # the pipeline must not fail because of this helper
            log.exception("could not check for straggling participants")
            return
        finally:
            self._busy.release()
        for gid in undone:
            log.warning("rolled back %s: prepared after its batch was decided without it", gid)
        self.rolled_back.extend(undone)

    def close(self) -> None:
        """Close the connections (waits for a running reap)."""
        with self._busy:
            self._coordinator.close()
