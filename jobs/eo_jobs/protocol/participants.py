"""The prepared-transaction side of a sink database, whatever the database: one interface.

The coordinator, recovery, the sweep and marker pruning see a sink database only through
``ParticipantStore``: list the pipeline's prepared participants (``in_doubt``), finish one by its
gid (``commit``/``rollback``, verified), create the marker table (``ensure_schema``), prune old
markers, report server limits and which database it reaches (``database_key``, so a database
listed through two sinks is resolved once). A database kind is a module implementing it:

* PostgreSQL: ``protocol.xa.PreparedTransactions`` (``PREPARE TRANSACTION gid``, ``eo.markers``);
* MySQL/MariaDB: ``protocol.mysql_xa.MySqlPreparedTransactions`` (XA branches, ``eo_markers``).

``protocol.databases.participant_store(dsn)`` picks one from the DSN's scheme. A third database
is a new module implementing this class and one line there, never a branch in the coordinator.

Phase 2 never guesses, on any database: finishing a gid the database no longer knows (unknown
gid, already finished) is decided by the participant's marker row, committed inside the
prepared transaction. Visible: it was committed. Not visible: it was rolled back (or never
prepared), unless the batch is at or below the prune horizon (markers deleted by pruning).
"""

from __future__ import annotations

import enum
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime

from eo_jobs.protocol.errors import InvariantViolationError, LostParticipantError
from eo_jobs.protocol.gid import Gid

log = logging.getLogger("eo.xa")

BUSY_RETRY_SECONDS = 30.0
"""How long finishing a gid another session is busy with (or still attached to) is retried."""
MARKER_RETENTION_SECONDS = 24 * 3600.0
"""Markers are pruned only once they are this old too (as well as ``MARKER_RETENTION_BATCHES``
behind), so a fast pipeline keeps a day of them for an audit of its participants."""
PRUNED_PREFIX = "pruned:"
"""Start of the gid of a prune horizon row in the marker table
(``pruned:<pipeline token>:<query token>``): its ``batch_id`` is the highest batch of that
streaming query whose markers pruning deleted. Never an eo gid. Kept per query, not per
pipeline: batch ids start again at 0 when a query starts over, and under a pipeline-wide horizon
a lost participant of the new query would pass for a pruned one."""


def horizon_gid(pipeline: str, query: str) -> str:
    """The horizon row's gid for pipeline token ``pipeline`` and query token ``query``."""
    return f"{PRUNED_PREFIX}{pipeline}:{query}"


class Outcome(enum.StrEnum):
    """What finishing a prepared transaction did."""

    COMMITTED = "committed"
    ALREADY_COMMITTED = "already-committed"
    ROLLED_BACK = "rolled-back"
    ALREADY_ROLLED_BACK = "already-rolled-back"
    MARKER_PRUNED = "marker-pruned"
    """A decided participant of a batch whose markers were pruned: it was committed (by phase 2
    or recovery, long ago) unless someone ignored the decision log, which nothing can tell any
    more. Not a loss to report."""


@dataclass(frozen=True)
class InDoubt:
    """One prepared participant found in a sink database.

    ``prepared_at`` is when it prepared where the database says so (PostgreSQL); MySQL's
    ``XA RECOVER`` gives no time, so there it is when this store first listed it (an age from
    it is a lower bound). ``owner`` is the preparing role where known, else ``""``.
    """

    gid: str
    parsed: Gid
    prepared_at: datetime
    owner: str


DatabaseKey = tuple[str, ...]
"""What a database's server says identifies it; equal keys mean one database."""


class ParticipantStore(ABC):
    """Prepared participants of one sink database (the database its DSN names).

    A kind implements the primitives (``finish``, ``marker_visible``, ``pruned_up_to``) and the
    listing; ``commit`` and ``rollback`` turn them into verified, idempotent ``Outcome``s the
    same way for every kind, so the driver, the operator and ``eo recover`` may race on a gid.
    """

    dsn: str

    @abstractmethod
    def ensure_schema(self) -> None:
        """Create the marker table if missing (never inside a prepared transaction)."""

    @abstractmethod
    def in_doubt(self, prefix: str) -> list[InDoubt]:
        """Our prepared participants whose gid starts with ``prefix``, in this database only."""

    @abstractmethod
    def server_limits(self) -> tuple[int, int]:
        """(prepared transactions in the whole server, how many the server can hold)."""

    @abstractmethod
    def prune_markers(self, pipeline: str, below_batch: int, audited: int | None = None) -> int:
        """Delete markers of batches well behind ``below_batch`` (``retention.prune_below``),
        keeping the highest pruned batch per streaming query as the prune horizon."""

    @abstractmethod
    def database_key(self) -> DatabaseKey:
        """Which database this store reaches, as its server says (``recovery.distinct``)."""

    @abstractmethod
    def label(self) -> str:
        """``host:port/database`` for messages (no user, no password)."""

    @abstractmethod
    def identity(self) -> str:
        """This database's stable random identity, created on first use (``registry``): a
        DSN can change (a new host name, a proxy) while the database stays the same."""

    @abstractmethod
    def decided_by(self, pipeline: str, control_id: str, control_label: str) -> tuple[str, str]:
        """``(control identity, label)`` this database records as the decider of ``pipeline``;
        when it records none yet, ``(control_id, control_label)`` is recorded and returned."""

    @abstractmethod
    def close(self) -> None:
        """Close the store's connection (idempotent)."""

    @abstractmethod
    def finish(self, verb: str, gid: str) -> bool:
        """``verb`` (COMMIT or ROLLBACK) the prepared ``gid``; False if the database does not
        know it as prepared (finished already, or never prepared). A gid another session is
        finishing right now is waited for, up to ``BUSY_RETRY_SECONDS``."""

    @abstractmethod
    def marker_visible(self, gid: str) -> bool:
        """Whether ``gid``'s marker row is committed here."""

    @abstractmethod
    def pruned_up_to(self, pipeline: str, query: str) -> int | None:
        """The highest batch of this pipeline's query whose markers were pruned here, if any
        (tokens, as in a gid)."""

    def commit(self, gid: str) -> Outcome:
        """Commit a decided participant; verified idempotent.

        A gid that is neither prepared nor marked was rolled back against the decision log
        (``LostParticipantError``), unless its batch is at or below the database's prune
        horizon: its marker may just have been pruned (a zombie finishing a batch recovery
        committed long ago), and that is reported as ``MARKER_PRUNED``, not as a loss.
        """
        if self.finish("COMMIT", gid):
            return Outcome.COMMITTED
        if self.marker_visible(gid):
            return Outcome.ALREADY_COMMITTED
        parsed = Gid.parse(gid)
        horizon = None if parsed is None else self.pruned_up_to(parsed.pipeline, parsed.query)
        if parsed is not None and horizon is not None and parsed.batch <= horizon:
            log.warning(
                "decided participant %s is finished and its marker was pruned (batches up to "
                "%d): committed long ago by phase 2 or recovery, which cannot be verified any more",
                gid,
                horizon,
            )
            return Outcome.MARKER_PRUNED
        raise LostParticipantError(
            f"decided participant {gid} is neither prepared nor committed (no marker): it was "
            "rolled back by someone who ignored the decision log; the batch is incomplete"
        )

    def rollback(self, gid: str) -> Outcome:
        """Roll back an undecided or losing participant; verified idempotent."""
        if self.finish("ROLLBACK", gid):
            return Outcome.ROLLED_BACK
        if self.marker_visible(gid):
            raise InvariantViolationError(
                f"participant {gid} was to be rolled back but is already committed"
            )
        return Outcome.ALREADY_ROLLED_BACK
