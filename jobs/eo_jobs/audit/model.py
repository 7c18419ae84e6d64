"""What an audit is given, where it starts, and what it returns.

Every type here is plain data that round-trips through JSON, because the operator keeps the
position between passes (in a status field or a ConfigMap) and shows the result in a
condition, and ``eo audit --json`` prints it for a person or a CronJob.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from eo_jobs.protocol.gid import query_token


class Check(enum.StrEnum):
    """The checks an audit pass runs; each violation and each skip names one."""

    SOURCE_COVERAGE = "source-coverage"
    """Offsets of consecutive decided batches are contiguous (Kafka per topic-partition; the
    file source's log offsets), and each decision says what Spark's offset log says."""
    SOURCE_FILES = "source-files"
    """Every file the file source logged belongs to exactly one decided batch."""
    DECISION_LOG = "decision-log"
    """No batch missing or decided twice, epochs never going down, no epoch above the fence,
    every participant named for its own batch and epoch."""
    PARTICIPANTS = "participants"
    """Every participant of every decided batch is committed: its marker is in its sink
    database, and the markers' rows add up to the decision's."""
    PREPARED = "prepared"
    """Nothing decided is still prepared longer than the bound."""
    ORPHAN_MARKERS = "orphan-markers"
    """No committed participant (marker) that no decision names."""
    TABLE_COUNT = "table-count"
    """The sink table's row count moves by what the markers of decided batches say (only for
    a table declared append-only with eo as its only writer)."""
    BATCH_COLUMN = "batch-column"
    """Rows per batch in the sink table equal the rows its participants wrote (only for a
    table with a declared column holding the batch id)."""
    SUM_COLUMNS = "sum-columns"
    """The sink table's sum of each declared sum column equals what eo computed from the
    batches' records before writing them (stored with each decision): per batch through the
    batch column of an append-only table, and table-wide (the sums at the last position plus
    the batches committed since) for an append-only or accumulate table."""


class Status(enum.StrEnum):
    """Whether a check ran over everything it was asked to look at."""

    RAN = "ran"
    PARTIAL = "partial"
    """Ran, but some batches could not be checked (the reason says which and why)."""
    NOT_RUN = "not-run"


@dataclass(frozen=True)
class SinkTarget:
    """One sink table of the pipeline and what the auditor may assume about it.

    ``append_only`` is a declaration by whoever runs the audit, not something eo can see: the
    table is written only by this pipeline and never updated or deleted from. Only then can a
    count that moved differently from the decisions be called a violation; without it the
    count check is reported as not run.
    """

    name: str
    dsn: str
    table: str
    """``schema.table``."""
    append_only: bool = False
    batch_column: str | None = None
    """A column holding the batch id of each row (eo's ``auditColumn``, or one the transform
    writes), or None."""
    batch_column_by_eo: bool = False
    """``batch_column`` is the sink's ``auditColumn``: eo alone writes batch ids into it, so
    the rows carrying a batch's id are that batch's whether or not other writers add rows."""
    sum_columns: tuple[str, ...] = ()
    """Columns whose exact sum per batch eo stores with the decision (``sumColumns``)."""
    accumulates: bool = False
    """The sink is mode accumulate: eo adds each batch's sums onto the table's rows, so (with
    eo the only writer of its sum columns) the table's sum of each moves by exactly the
    batch's."""

    @property
    def per_batch(self) -> bool:
        """Rows (and sums) per batch can be checked: a batch column that only eo's batches
        fill, because eo writes it or because the table is declared eo's alone."""
        return self.batch_column is not None and (self.append_only or self.batch_column_by_eo)


@dataclass(frozen=True)
class AuditTarget:
    """Everything an audit pass of one pipeline reads. Nothing here is written to."""

    pipeline: str
    """The pipeline key, ``namespace/name``."""
    control_dsn: str
    sinks: tuple[SinkTarget, ...]
    dead_letter_dsn: str | None = None
    """The dead-letter participants' database (the first sink's); None: the first sink's."""
    checkpoint: str | None = None
    """Spark's checkpoint location; only a local path (or ``file://``) is read here."""
    prepared_bound_seconds: float = 600.0
    """How long a decided participant may stay prepared before it is a violation. Phase 2
    retries for ``EO_PHASE_TWO_RETRY_SECONDS`` (300 s) before a driver gives up, and recovery
    of the next driver finishes it, so the default leaves room for both."""

    def dead_letters_dsn(self) -> str:
        """Where the dead-letter participants prepare (the first sink's database)."""
        return self.dead_letter_dsn or self.sinks[0].dsn


@dataclass(frozen=True)
class Position:
    """Where the last pass stopped: per streaming query (by its gid token), the last batch
    whose every check is final, and per sink the table rows that batch and everything before
    it account for (the count check's baseline), and the sums of its sum columns (the
    table-wide sum check's baseline).

    A batch whose participants are still being committed stays ahead of the position, so the
    next pass looks at it again instead of carrying an unfinished count.
    """

    batches: Mapping[str, int] = field(default_factory=dict)
    """Query token -> last audited batch id."""
    table_rows: Mapping[str, int] = field(default_factory=dict)
    """Sink name -> rows of the table that batches at or below the position account for."""
    table_sums: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Sink name -> sum column -> the table's sum (exact, decimal text) that batches at or
    below the position account for."""

    def batch(self, token: str) -> int:
        """The last audited batch of a query, -1 when none was."""
        return int(self.batches.get(token, -1))

    def as_json(self) -> dict[str, Any]:
        """The JSON the operator (or ``eo audit --position FILE``) keeps between passes."""
        return {
            "batches": dict(self.batches),
            "table_rows": dict(self.table_rows),
            "table_sums": {k: dict(v) for k, v in self.table_sums.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Position:
        """Read back ``as_json``."""
        return cls(
            {str(k): int(v) for k, v in (data.get("batches") or {}).items()},
            {str(k): int(v) for k, v in (data.get("table_rows") or {}).items()},
            {
                str(sink): {str(c): str(v) for c, v in (sums or {}).items()}
                for sink, sums in (data.get("table_sums") or {}).items()
            },
        )


@dataclass(frozen=True)
class Violation:
    """One thing that is not as exactly-once requires, with the evidence."""

    check: Check
    batch: int | None
    """The batch id it concerns (None for a table-wide finding with no one batch)."""
    query: str | None
    """The streaming query id (or its gid token when no decision names it)."""
    evidence: str

    def as_json(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "check": str(self.check),
            "batch": self.batch,
            "query": self.query,
            "evidence": self.evidence,
        }


@dataclass(frozen=True)
class CheckRun:
    """A check over one subject (a sink, the source), and whether it ran."""

    check: Check
    subject: str
    status: Status
    detail: str = ""
    """Why it did not run, or what part it could not check; empty when it fully ran."""

    def as_json(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "check": str(self.check),
            "subject": self.subject,
            "status": str(self.status),
            "detail": self.detail,
        }


@dataclass(frozen=True)
class AuditResult:
    """The outcome of one pass."""

    pipeline: str
    start: Position
    end: Position
    """Where the next pass starts."""
    batches: int
    """Decided batches looked at in this pass."""
    last_batch: Mapping[str, int]
    """Query id -> highest decided batch seen (what the audit lag is measured against)."""
    checks: tuple[CheckRun, ...]
    violations: tuple[Violation, ...]
    pending: tuple[str, ...] = ()
    """Batches left for the next pass (phase 2 still running), in words."""
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    """CPU time of the auditing thread (its own work: parsing, checking), not the databases'."""

    @property
    def ok(self) -> bool:
        """No violation (checks that did not run are listed, and are not a pass)."""
        return not self.violations

    def first_violation(self) -> Violation | None:
        """The violation with the lowest batch (for a condition's message)."""
        if not self.violations:
            return None
        return min(self.violations, key=lambda v: (v.batch is None, v.batch or 0, v.check))

    def lag(self) -> dict[str, int]:
        """Per query id, the decided batches beyond the new position (the audit lag metric)."""
        return {
            query: top - self.end.batch(query_token(query))
            for query, top in self.last_batch.items()
        }

    def not_run(self) -> list[CheckRun]:
        """Checks that did not run, or ran only in part."""
        return [c for c in self.checks if c.status is not Status.RAN]

    def as_json(self) -> dict[str, Any]:
        """JSON form (``eo audit --json``)."""
        return {
            "pipeline": self.pipeline,
            "ok": self.ok,
            "batches": self.batches,
            "last_batch": dict(self.last_batch),
            "start": self.start.as_json(),
            "end": self.end.as_json(),
            "checks": [c.as_json() for c in self.checks],
            "violations": [v.as_json() for v in self.violations],
            "pending": list(self.pending),
            "seconds": round(self.seconds, 3),
            "cpu_seconds": round(self.cpu_seconds, 3),
        }
