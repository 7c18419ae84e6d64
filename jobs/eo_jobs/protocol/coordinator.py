"""The driver's side of one batch: replay check, decision, phase 2.

The driver holds one epoch for its whole life. For batch N it (1) treats an existing decision
as a replay and only rolls its participants forward, (2) otherwise clears whatever earlier
attempts left prepared, (3) lets writer tasks prepare (elsewhere: Spark tasks or threads),
(4) writes the fenced decision, (5) commits the winners and rolls back losing attempts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eo_jobs.protocol.control import ForeignFenceOwnerError
from eo_jobs.protocol.control_api import ControlDatabase, Decision, Fence, Sums
from eo_jobs.protocol.databases import control_store, participant_store
from eo_jobs.protocol.errors import (
    CheckpointMismatchError,
    CheckpointResetError,
    FencedError,
)
from eo_jobs.protocol.faults import crash_point
from eo_jobs.protocol.gid import Gid, pipeline_prefix, query_token, sink_token
from eo_jobs.protocol.participants import ParticipantStore
from eo_jobs.protocol.recovery import RecoveryReport, distinct, finisher, recover, resolve

log = logging.getLogger("eo.coordinator")

MARKER_PRUNE_EVERY = 100
"""Phase 2 prunes old markers at every batch whose id is a multiple of this."""


class CheckpointAheadError(CheckpointMismatchError):
    """Spark's commit log holds a batch the decision log does not (exit 76, as a mismatch)."""


@dataclass(frozen=True)
class Prepared:
    """What a writer task hands back: its prepared gid and row count, per sink."""

    sink: str
    gid: str
    rows: int


@dataclass(frozen=True)
class Decided:
    """A batch whose decision is durable; phase 2 may still be pending."""

    query_id: str
    batch_id: int
    winners: tuple[Prepared, ...]
    rows: int
    prepare_ms: float
    decide_ms: float


@dataclass(frozen=True)
class BatchResult:
    """Outcome of one batch on the driver."""

    batch_id: int
    replayed: bool
    rows: int
    prepare_ms: float
    decide_ms: float
    commit_ms: float
    rolled_back_losers: int
    rows_by_sink: Mapping[str, int]


class Coordinator:
    """Runs the protocol for one pipeline and one epoch."""

    def __init__(
        self,
        pipeline: str,
        epoch: int,
        control: ControlDatabase,
        stores: Mapping[str, ParticipantStore],
        owner: str | None = None,
    ) -> None:
        if epoch <= 0:
            raise ValueError("epoch must be positive")
        self.pipeline = pipeline
        self.epoch = epoch
        self.owner = owner
        """The writer this driver runs for (``EO_FENCE_OWNER``); None runs only under a fence
        nobody owns."""
        self.control = control
        self.stores = dict(stores)
        self._by_token = {sink_token(name): store for name, store in self.stores.items()}
        self._checked_queries: set[str] = set()

    def startup(self) -> RecoveryReport:
        """Fence to this epoch and resolve everything left behind (driver start).

        A fence another writer owns is refused before it is raised: a driver without the
        right to run must not fence the one that has it either.
        """
        self.control.ensure_schema()
        self._check_owner(self.control.fence(self.pipeline))
        return recover(self.control, self.stores, self.pipeline, self.epoch, self.owner)

    def _check_owner(self, fence: Fence | None) -> None:
        if fence is not None and fence.owner is not None and fence.owner != self.owner:
            raise ForeignFenceOwnerError(
                self.pipeline, self.epoch, fence.epoch, fence.owner, self.owner
            )

    def gid(self, query_id: str, sink: str, batch_id: int, task: int, attempt: int) -> str:
        """The gid a writer task must prepare under."""
        return str(
            Gid.build(
                pipeline=self.pipeline,
                query_id=query_id,
                sink=sink,
                epoch=self.epoch,
                batch=batch_id,
                task=task,
                attempt=attempt,
            )
        )

    def check_checkpoint(self, query_id: str, latest_committed: int | None) -> None:
        """Refuse a checkpoint ahead of the decision log (driver start, before recovery).

        Spark commits a batch only after ``foreachBatch`` returned, which it does only once the
        batch's decision (or, without two-phase commit, its ``record``) is durable: the
        decision log therefore holds every batch Spark committed, the latest included. When
        it does not, this control database is not the one the checkpoint ran against (a sink
        DSN re-pointed at an empty database, a restored backup, decisions lost in a failover):
        recovery would roll back what the missing decisions name, and Spark would never replay
        those batches.
        """
        if latest_committed is None:
            return
        if self.control.decision(self.pipeline, query_id, latest_committed) is not None:
            return
        known = self.control.queries(self.pipeline)
        last = next((b for q, b in known if q == query_id), None)
        have = (
            f"its last decision for this query is batch {last}"
            if last is not None
            else "it has no decision for this query"
        )
        raise CheckpointAheadError(
            f"checkpoint ahead of the decision log for {self.pipeline}: Spark committed batch "
            f"{latest_committed} of query {query_id}, but the control database has no decision "
            f"for it ({have}). This is not the control database the checkpoint ran against (a "
            "sink DSN re-pointed at another database, a control database restored from a "
            "backup, decisions lost in a failover); running on would lose what the missing "
            "decisions name. Point spec.control (or the first sink) back at the database that "
            "decided these batches, or, to start over on purpose, use a new "
            "spec.checkpoint.location."
        )

    def check_query(self, query_id: str) -> None:
        """Refuse a new query id over an old decision log (a lost or replaced checkpoint)."""
        if query_id in self._checked_queries:
            return
        if not self.control.has_decisions(self.pipeline, query_id):
            others = self.control.other_queries(self.pipeline, query_id)
            if others:
                listed = ", ".join(f"{q} (last batch {b})" for q, b in others)
                raise CheckpointResetError(
                    f"checkpoint reset detected for {self.pipeline}: streaming query {query_id} "
                    f"is new, but batches were already decided by query {listed}. The Spark "
                    "checkpoint was lost or replaced; replaying from scratch would duplicate "
                    "data. Restore spec.checkpoint.location, or, to start over on purpose, "
                    f"run `eo forget-query PIPELINE.yaml --query-id {others[0][0]}` first."
                )
        self._checked_queries.add(query_id)

    def begin(self, query_id: str, batch_id: int, offsets: Any) -> Decision | None:
        """Start batch N: return its decision if it is a replay (after rolling it forward)."""
        self.check_query(query_id)
        decision = self.control.decision(self.pipeline, query_id, batch_id)
        if decision is not None:
            if (
                offsets is not None
                and decision.source_offsets is not None
                and decision.source_offsets != offsets
            ):
                raise CheckpointMismatchError(
                    f"batch {batch_id} of {self.pipeline} was decided with source offsets "
                    f"{decision.source_offsets} but is being replayed with {offsets}: the "
                    "checkpoint does not belong to this decision log; restore the original "
                    "checkpoint"
                )
            self._roll_forward(decision)
            return decision
        fence = self.control.fence(self.pipeline)
        if fence is None or fence.epoch > self.epoch:
            raise FencedError(self.pipeline, self.epoch, None if fence is None else fence.epoch)
        # Another writer's driver may hold this very epoch: resolving below would roll back
        # its participants.
        self._check_owner(fence)
        resolve(self.control, self.stores, self.pipeline, select=lambda g: g.epoch <= self.epoch)
        crash_point("before-prepare", batch_id)
        return None

    def _roll_forward(self, decision: Decision) -> None:
        prefix = pipeline_prefix(self.pipeline)
        winners = set(decision.participants)
        for store in distinct(self.stores):
            for item in store.in_doubt(prefix):
                if item.gid in winners:
                    finisher(self.stores, item, store).commit(item.gid)

    def decide(
        self,
        query_id: str,
        batch_id: int,
        prepared: Sequence[Prepared],
        offsets: Any,
        prepare_ms: float,
        sums: Sums | None = None,
    ) -> Decided:
        """Write the fenced decision naming one winner per task (phase 1 ends here), with the
        batch's ``sums`` per sink when sinks declare sum columns (what the audit checks)."""
        winners = _one_per_task(prepared, batch_id)
        rows = sum(p.rows for p in winners)
        crash_point("before-decision", batch_id)
        try:
            decide_ms = self.control.decide(
                pipeline=self.pipeline,
                query_id=query_id,
                batch_id=batch_id,
                epoch=self.epoch,
                participants=[p.gid for p in winners],
                source_offsets=offsets,
                rows_written=rows,
                prepare_ms=prepare_ms,
                sums=sums,
            )
        except FencedError:
            self.abandon(batch_id)
            raise
        crash_point("after-decision", batch_id)
        return Decided(query_id, batch_id, tuple(winners), rows, prepare_ms, decide_ms)

    def commit(self, decided: Decided) -> BatchResult:
        """Phase 2: commit every winner, roll back losing attempts, record completion."""
        started = time.perf_counter()
        for index, item in enumerate(decided.winners):
            self._store_for(item.gid).commit(item.gid)
            if index == 0 and len(decided.winners) > 1:
                crash_point("after-some-commits", decided.batch_id)
        commit_ms = (time.perf_counter() - started) * 1000.0
        losers = self._roll_back_losers(decided.batch_id, {p.gid for p in decided.winners})
        self._housekeeping(decided, commit_ms)
        crash_point("after-commits", decided.batch_id)
        by_sink = rows_by_sink(decided.winners)
        return BatchResult(
            decided.batch_id,
            False,
            decided.rows,
            decided.prepare_ms,
            decided.decide_ms,
            commit_ms,
            losers,
            by_sink,
        )

    def _housekeeping(self, decided: Decided, commit_ms: float) -> None:
        """The completion mark (metrics only) and marker pruning (bounded growth), best effort.

        Both run after every winner is committed, so the batch is complete whatever they do;
        a control or sink database blip here must not fail phase 2 (and so the next batch and
        the driver). A lost mark leaves the batch without a phase-2 duration, as a batch
        finished by recovery has; a missed prune is done by a later batch's. Pruning runs every
        ``MARKER_PRUNE_EVERY`` batches: markers are kept a day, and each prune scans them.
        """
        self._mark_committed(decided.query_id, decided.batch_id, commit_ms)
        if decided.batch_id % MARKER_PRUNE_EVERY != 0:
            return
        token = query_token(decided.query_id)
        try:
            audited = self.control.audited_batch(self.pipeline, token)
        except Exception as exc:
            log.warning(
                "batch %s is committed; markers are not pruned this time, since how far the "
                "audit got cannot be read (a later prune tries again): %s: %s",
                decided.batch_id,
                type(exc).__name__,
                exc,
            )
            return
        for store in distinct(self.stores):
            try:
                store.prune_markers(self.pipeline, decided.batch_id, audited)
            except Exception as exc:
                log.warning(
                    "batch %s is committed, but pruning old markers in %s failed (a later "
                    "prune tries again): %s: %s",
                    decided.batch_id,
                    store.label(),
                    type(exc).__name__,
                    exc,
                )

    def _mark_committed(self, query_id: str, batch_id: int, commit_ms: float) -> None:
        """Record phase 2's completion (metrics only); a failure is logged, never raised."""
        try:
            self.control.mark_committed(self.pipeline, query_id, batch_id, commit_ms)
        except Exception as exc:
            log.warning(
                "batch %s is committed, but its completion mark (metrics only) failed: %s: %s",
                batch_id,
                type(exc).__name__,
                exc,
            )

    def decide_and_commit(
        self,
        query_id: str,
        batch_id: int,
        prepared: Sequence[Prepared],
        offsets: Any,
        prepare_ms: float,
        sums: Sums | None = None,
    ) -> BatchResult:
        """Decide batch N with the winning participants, then run phase 2."""
        return self.commit(self.decide(query_id, batch_id, prepared, offsets, prepare_ms, sums))

    def record(
        self,
        query_id: str,
        batch_id: int,
        written: Sequence[Prepared],
        offsets: Any,
        prepare_ms: float,
    ) -> BatchResult:
        """At-least-once and idempotent modes: rows are already committed; log the batch.

        The decision row still goes through the fence, so progress, replay detection and
        health work the same, but nothing protects the rows a zombie already committed:
        that is the difference the guarantee field names.
        """
        rows = sum(p.rows for p in written)
        decide_ms = self.control.decide(
            pipeline=self.pipeline,
            query_id=query_id,
            batch_id=batch_id,
            epoch=self.epoch,
            participants=[],
            source_offsets=offsets,
            rows_written=rows,
            prepare_ms=prepare_ms,
        )
        self._mark_committed(query_id, batch_id, 0.0)
        by_sink = rows_by_sink(written)
        return BatchResult(batch_id, False, rows, prepare_ms, decide_ms, 0.0, 0, by_sink)

    def abandon(self, batch_id: int, reason: str | None = None, query_id: str | None = None) -> int:
        """Roll back this epoch's prepared participants of a failed or fenced batch."""
        undone = resolve(
            self.control,
            self.stores,
            self.pipeline,
            select=lambda g: g.epoch == self.epoch and g.batch == batch_id,
        )
        if reason is not None:
            self.control.record_failure(
                self.pipeline, reason, query_id=query_id, batch_id=batch_id, epoch=self.epoch
            )
        return len(undone.rolled_back)

    def roll_back_stragglers(self, query_id: str) -> list[str]:
        """Roll back prepared participants of decided batches that their decision does not name.

        A decision is final, so such a transaction can never be committed, whenever it
        prepared: a writer-task attempt that PREPAREd after its job ended (a task killed after
        its last row, an executor declared lost that still ran), after phase 2 rolled back the
        batch's losers. Until the next batch's ``begin`` it holds its row locks, which on an
        idle stream can be hours. Safe at any time and from any thread with its own
        connections (``with_own_connections``): a batch without a decision (the one in flight)
        is never touched. Epochs above this driver's are left alone (a newer driver's).
        """
        prefix = pipeline_prefix(self.pipeline)
        token = query_token(query_id)
        decisions: dict[int, Decision | None] = {}
        undone: list[str] = []
        for store in distinct(self.stores):
            for item in store.in_doubt(prefix):
                g = item.parsed
                if g.epoch > self.epoch or g.query != token:
                    continue
                if g.batch not in decisions:
                    decisions[g.batch] = self.control.decision(self.pipeline, query_id, g.batch)
                decision = decisions[g.batch]
                if decision is None or item.gid in decision.participants:
                    continue
                finisher(self.stores, item, store).rollback(item.gid)
                undone.append(item.gid)
        return undone

    def with_own_connections(self) -> Coordinator:
        """The same coordinator on connections of its own, for another thread."""
        return Coordinator(
            self.pipeline,
            self.epoch,
            control_store(self.control.dsn),
            {name: participant_store(store.dsn) for name, store in self.stores.items()},
            self.owner,
        )

    def close(self) -> None:
        """Close the connections (of a coordinator from ``with_own_connections``)."""
        self.control.close()
        for store in self.stores.values():
            store.close()

    def _roll_back_losers(self, batch_id: int, winners: set[str]) -> int:
        prefix = pipeline_prefix(self.pipeline)
        count = 0
        for store in distinct(self.stores):
            for item in store.in_doubt(prefix):
                g = item.parsed
                if g.epoch == self.epoch and g.batch == batch_id and item.gid not in winners:
                    finisher(self.stores, item, store).rollback(item.gid)
                    count += 1
        return count

    def _store_for(self, gid: str) -> ParticipantStore:
        parsed = Gid.parse(gid)
        if parsed is None or parsed.sink not in self._by_token:
            raise ValueError(f"{gid} does not belong to a sink of {self.pipeline}")
        return self._by_token[parsed.sink]


def rows_by_sink(parts: Sequence[Prepared]) -> dict[str, int]:
    """Rows written per sink by a batch's participants."""
    totals: dict[str, int] = {}
    for part in parts:
        totals[part.sink] = totals.get(part.sink, 0) + part.rows
    return totals


def _one_per_task(prepared: Sequence[Prepared], batch_id: int) -> list[Prepared]:
    """Exactly one winner per (sink, task index): the lowest attempt if Spark reported two.

    Every participant must be named for ``batch_id``: the tasks learn their batch from their
    job (``runtime.arrow_writer``), and a decision naming another batch's transaction would
    commit that batch's rows under this one.
    """
    best: dict[tuple[str, int], tuple[int, Prepared]] = {}
    for item in prepared:
        parsed = Gid.parse(item.gid)
        if parsed is None:
            raise ValueError(f"not an eo gid: {item.gid}")
        if parsed.batch != batch_id:
            raise ValueError(f"participant {item.gid} of batch {parsed.batch} in batch {batch_id}")
        key = (item.sink, parsed.task)
        if key not in best or parsed.attempt < best[key][0]:
            best[key] = (parsed.attempt, item)
    return [best[k][1] for k in sorted(best)]
