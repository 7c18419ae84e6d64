"""Monotonic batch and failure counts, and once-only batch durations, from the decision log.

The operator's counters must count real batches. Status figures cannot do it: they are counts
over a sliding 15-minute window, and a counter fed their running maximum stops growing once the
window is full (the failure-rate alert then divides new failures by almost nothing). Here each
decision row and each failure row is counted exactly once, by its key, as it appears.

Rows become visible in ``decided_at`` order per pipeline (a decision updates the fence row first
and reads the clock under that row lock), and ``failed_at`` is read right before a one-statement
commit; re-reading a margin behind the newest timestamp seen, with the keys already counted in
that margin remembered, tolerates small clock and visibility skews without counting twice.

Durations are known only once phase 2 is done (``committed_at`` set), which can happen after the
read that first saw the decision; such decisions stay pending and are re-read by key until they
are committed, so the histograms see every batch once, however many decisions a pass brings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from eo_jobs.protocol.control_api import ControlDatabase

MARGIN: Final = timedelta(seconds=60)
"""How far behind the newest timestamp seen each read starts again (keys dedupe the overlap)."""
PENDING_LIMIT: Final = timedelta(hours=1)
"""A decision still without ``committed_at`` this long after the newest one is given up on:
recovery commits in-doubt batches without recording a phase-2 duration."""
FIRST_LOOK: Final = timedelta(hours=1)
"""The first read (operator start, or a pipeline first seen) only takes note of this much."""

Key = tuple[str, int]


@dataclass(frozen=True)
class Fresh:
    """What one read found that no earlier read had: durations of batches that finished."""

    batches: int = 0
    failures: int = 0
    checkpoint_seconds: tuple[float, ...] = ()
    commit_seconds: tuple[float, ...] = ()


@dataclass
class BatchTally:
    """Per-pipeline bookkeeping of what was already counted; one per pipeline, in memory.

    Totals start at 0 when the operator (re)starts, as any Prometheus counter does: what was
    decided before is history that the first read only takes note of.
    """

    batches: int = 0
    failures: int = 0
    _primed: bool = False
    _decided_high: datetime | None = None
    _decided: dict[Key, datetime] = field(default_factory=dict)
    _pending: dict[Key, datetime] = field(default_factory=dict)
    _failed_high: datetime | None = None
    _failed: dict[int, datetime] = field(default_factory=dict)

    def read(self, control: ControlDatabase, pipeline: str) -> Fresh:
        """Count the decisions and failures that appeared since the previous read."""
        first = not self._primed
        first_look = FIRST_LOOK.total_seconds()
        since = None if self._decided_high is None else self._decided_high - MARGIN
        rows = control.timings(pipeline, since, first_look, sorted(self._pending))
        failed_since = None if self._failed_high is None else self._failed_high - MARGIN
        failures = control.failures_after(pipeline, failed_since, first_look)
        checkpoint: list[float] = []
        commit: list[float] = []
        new_batches = 0
        for row in rows:
            key: Key = (row.query_id, row.batch_id)
            decided_at: datetime = row.decided_at
            if key not in self._decided:
                self._decided[key] = decided_at
                if self._decided_high is None or decided_at > self._decided_high:
                    self._decided_high = decided_at
                if not first:
                    new_batches += 1
                if row.commit_ms is None:
                    self._pending[key] = decided_at
                    continue
                if first:
                    continue
            elif key not in self._pending or row.commit_ms is None:
                continue
            self._pending.pop(key, None)
            commit_ms = float(row.commit_ms)
            commit.append(commit_ms / 1000.0)
            checkpoint.append(
                (float(row.prepare_ms or 0.0) + float(row.decide_ms or 0.0) + commit_ms) / 1000.0
            )
        new_failures = 0
        for failure_id, failed_at in failures:
            if failure_id in self._failed:
                continue
            self._failed[failure_id] = failed_at
            if self._failed_high is None or failed_at > self._failed_high:
                self._failed_high = failed_at
            if not first:
                new_failures += 1
        self._primed = True
        self._prune()
        self.batches += new_batches
        self.failures += new_failures
        return Fresh(new_batches, new_failures, tuple(checkpoint), tuple(commit))

    def _prune(self) -> None:
        """Forget keys that no later read can return again (bounded memory)."""
        if self._decided_high is not None:
            horizon = self._decided_high - MARGIN
            self._decided = {
                k: t for k, t in self._decided.items() if t > horizon or k in self._pending
            }
            limit = self._decided_high - PENDING_LIMIT
            self._pending = {k: t for k, t in self._pending.items() if t > limit}
        if self._failed_high is not None:
            horizon = self._failed_high - MARGIN
            self._failed = {i: t for i, t in self._failed.items() if t > horizon}
