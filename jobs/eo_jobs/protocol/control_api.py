"""What a control database must do, whatever its kind: the interface the protocol runs on.

The coordinator, recovery, the registry, marker retention, the CLI, the audit and the operator
only call these methods, so a pipeline's fence and decision log can live in PostgreSQL
(``protocol.control.ControlStore``) or in MySQL/MariaDB (``protocol.mysql_control``) with the
same semantics; ``protocol.databases.control_store`` picks the kind from the DSN. SQL of one
kind stays inside its implementation.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

Key = tuple[str, int]
"""A batch of a streaming query: (query id, batch id)."""

Sums = Mapping[str, Mapping[str, str] | None]
"""Per sink with declared sum columns: column -> exact sum as decimal text over the rows the
batch wrote there; None for a sink whose rows this batch have no comparable sum (records its
database refused went to dead letters). Stored with the decision (``eo.decisions.sums``)."""


@dataclass(frozen=True)
class Decision:
    """A decided batch, as read back from the decision log."""

    pipeline: str
    query_id: str
    batch_id: int
    epoch: int
    participants: tuple[str, ...]
    source_offsets: Any
    rows_written: int
    decided_at: datetime
    committed_at: datetime | None
    prepare_ms: float | None = None
    decide_ms: float | None = None
    commit_ms: float | None = None

    @property
    def checkpoint_seconds(self) -> float | None:
        """Whole batch: prepare + decide + commit, once phase 2 is done."""
        if self.commit_ms is None:
            return None
        return ((self.prepare_ms or 0.0) + (self.decide_ms or 0.0) + self.commit_ms) / 1000.0


@dataclass(frozen=True)
class FenceChange:
    """Result of raising a fence."""

    previous: int | None
    current: int
    previous_owner: str | None = None


@dataclass(frozen=True)
class Fence:
    """A pipeline's fence row: the epoch no older driver may decide below, and its owner.

    ``owner`` None means nobody owns it: a row an older eo wrote, one raised only as a fence
    (``eo recover``), or one its owner released (a deleted pipeline's finalizer).
    """

    epoch: int
    owner: str | None


@dataclass(frozen=True)
class ParticipantDatabase:
    """A database that held participants of a pipeline, as the control database recorded it."""

    sink: str
    database: str
    label: str
    dsn_ref: dict[str, Any]


@dataclass(frozen=True)
class Timing:
    """One decision row as the operator's tally reads it (``eo_operator.tally``)."""

    query_id: str
    batch_id: int
    decided_at: datetime
    prepare_ms: float | None
    decide_ms: float | None
    commit_ms: float | None


@dataclass(frozen=True)
class LifecycleRecord:
    """A lifecycle action a driver did (``runtime.lifecycle``), as the control database keeps
    it: the record of its nonce (one action per nonce), and what the operator lists in status.

    Kept after retention deletes its snapshot folder (``pruned_at`` set): a start-over's
    record is what keeps its nonce from starting the pipeline over a second time.
    """

    pipeline: str
    kind: str
    """``snapshot`` or ``start-over``."""
    nonce: str
    name: str
    """The snapshot folder under ``<checkpoint>/eo-snapshots``."""
    epoch: int
    """The epoch of the driver that did it."""
    detail: Mapping[str, Any]
    """The decision log's position it saw (``queryId``, ``lastDecidedBatch``,
    ``lastDecidedEpoch``, ``lastCommittedBatch``); for a start-over also ``forgottenQueries``
    and ``forgottenDecisions``."""
    taken_at: datetime | None = None
    pruned_at: datetime | None = None


class ControlDatabase(ABC):
    """Fence, decision log, failures, audit positions and participant registry of a pipeline.

    Implementations keep one connection, reopened when it died; ``close`` ends it.
    """

    dsn: str

    # -- schema ---------------------------------------------------------------------------

    @abstractmethod
    def ensure_schema(self) -> None:
        """Create the control tables that are missing (no DDL when all exist)."""

    @abstractmethod
    def has_control_tables(self) -> bool:
        """Whether this database holds the fence and the decision log (read-only check)."""

    # -- fence ----------------------------------------------------------------------------

    @abstractmethod
    def fence(self, pipeline: str) -> Fence | None:
        """The fence row of a pipeline (epoch and owner), or ``None`` before its first driver."""

    def fence_epoch(self, pipeline: str) -> int | None:
        """Current fence of a pipeline, or ``None`` before its first driver."""
        fence = self.fence(pipeline)
        return None if fence is None else fence.epoch

    @abstractmethod
    def raise_fence(
        self,
        pipeline: str,
        epoch: int,
        owner: str | None = None,
        *,
        adopt_from: str | None = None,
    ) -> FenceChange:
        """Raise the fence to ``epoch`` (equal: no-op, lower: ``FenceRegressionError``),
        serialised per pipeline and after any in-flight decision; owner rules as
        ``ControlStore.raise_fence`` documents."""

    @abstractmethod
    def release_fence(self, pipeline: str, owner: str) -> bool:
        """Let go of the fence if ``owner`` holds it (its epoch stays); whether it held it."""

    # -- decisions ------------------------------------------------------------------------

    @abstractmethod
    def decide(
        self,
        *,
        pipeline: str,
        query_id: str,
        batch_id: int,
        epoch: int,
        participants: Sequence[str],
        source_offsets: Any,
        rows_written: int,
        prepare_ms: float,
        sums: Sums | None = None,
    ) -> float:
        """Write the decision of a batch under the fence (``FencedError`` when it moved past
        ``epoch``); return its duration in ms."""

    @abstractmethod
    def decision(self, pipeline: str, query_id: str, batch_id: int) -> Decision | None:
        """The decision of (pipeline, query, batch), if one exists."""

    @abstractmethod
    def queries(self, pipeline: str) -> list[tuple[str, int]]:
        """Query ids with decisions for this pipeline, with their last batch, oldest first."""

    def other_queries(self, pipeline: str, query_id: str) -> list[tuple[str, int]]:
        """Other query ids with decisions for this pipeline, with their last batch."""
        return [(q, b) for q, b in self.queries(pipeline) if q != query_id]

    @abstractmethod
    def has_decisions(self, pipeline: str, query_id: str) -> bool:
        """Whether the query has decided any batch."""

    @abstractmethod
    def winners(self, pipeline: str, gids: Iterable[str], batches: Iterable[int]) -> set[str]:
        """The subset of ``gids`` named as participants by some decision of the pipeline
        among ``batches``."""

    @abstractmethod
    def mark_committed(self, pipeline: str, query_id: str, batch_id: int, commit_ms: float) -> None:
        """Record phase-2 completion (commit duration and time) of a decided batch."""

    @abstractmethod
    def forget_query(self, pipeline: str, query_id: str) -> int:
        """Delete a query's decisions; how many."""

    # -- lifecycle (``runtime.lifecycle``) ----------------------------------------------------

    @abstractmethod
    def lifecycle_records(self, pipeline: str) -> list[LifecycleRecord]:
        """The pipeline's lifecycle records, oldest first ([] before the first one: the table
        is created by the first record, so a driver role without lifecycle actions never needs
        to create it)."""

    @abstractmethod
    def record_lifecycle(self, record: LifecycleRecord, forget: Sequence[str] = ()) -> int | None:
        """Record ``record`` and delete the decisions of the queries ``forget``, in one
        transaction; the decisions deleted, or None when its (kind, nonce) was recorded
        already (nothing deleted then). Creates the table when missing."""

    @abstractmethod
    def prune_lifecycle(self, pipeline: str, kind: str, nonce: str) -> None:
        """Mark a record's snapshot folder deleted (``pruned_at``); the record stays."""

    @abstractmethod
    def recent_decisions(self, pipeline: str, limit: int = 50) -> list[Decision]:
        """The latest decisions, newest first."""

    @abstractmethod
    def timings(
        self, pipeline: str, since: datetime | None, first_look_seconds: float, keys: Sequence[Key]
    ) -> list[Timing]:
        """Decisions after ``since`` (``None``: the last ``first_look_seconds``) or with one of
        ``keys`` (query id, batch id), by ``decided_at`` (the operator's tally)."""

    # -- failures -------------------------------------------------------------------------

    @abstractmethod
    def record_failure(
        self,
        pipeline: str,
        reason: str,
        *,
        query_id: str | None = None,
        batch_id: int | None = None,
        epoch: int | None = None,
    ) -> None:
        """Log a failed batch attempt (feeds the failure-rate metric and alert)."""

    @abstractmethod
    def failures_after(
        self, pipeline: str, since: datetime | None, first_look_seconds: float
    ) -> list[tuple[int, datetime]]:
        """(id, failed_at) of failures after ``since`` (``None``: the last
        ``first_look_seconds``), oldest first (the operator's tally)."""

    @abstractmethod
    def attempts_since(self, pipeline: str, seconds: float) -> tuple[int, int]:
        """(decided batches, failed attempts) within the last ``seconds``."""

    # -- audit positions (``protocol.retention``) -----------------------------------------

    @abstractmethod
    def audited_batch(self, pipeline: str, query: str) -> int | None:
        """The audited batch of a query that still holds markers back, else None."""

    @abstractmethod
    def record_audited(self, pipeline: str, batches: Mapping[str, int]) -> None:
        """Save the audit position (query token -> last audited batch)."""

    @abstractmethod
    def forget_audited(self, pipeline: str) -> None:
        """Drop the pipeline's audit positions."""

    # -- registry (``protocol.registry``) ---------------------------------------------------

    @abstractmethod
    def identity(self) -> str:
        """This database's stable random identity, created on first use (schema exists)."""

    @abstractmethod
    def label(self) -> str:
        """``host:port/database`` of this database, for messages (no credentials)."""

    @abstractmethod
    def record_participant_database(
        self, pipeline: str, database: str, sink: str, label: str, dsn_ref: Mapping[str, Any]
    ) -> None:
        """Record (or refresh the label and reference of) a database holding participants."""

    @abstractmethod
    def participant_databases(self, pipeline: str) -> list[ParticipantDatabase]:
        """Every database recorded holding participants of ``pipeline``, first seen first."""

    # -- connection -----------------------------------------------------------------------

    @abstractmethod
    def close(self) -> None:
        """Close the connection (idempotent)."""
