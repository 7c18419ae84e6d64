"""Participants against their sink databases: committed, not stuck, none without a decision.

A participant writes its marker inside its own transaction, so the marker is visible exactly
when the participant's rows are: a marker means committed, a gid still in
``pg_prepared_xacts`` means phase 2 has not reached it yet, and neither means it was rolled back
although a decision names it (rows lost). The converse also holds: a marker that no decision
names is a participant someone committed against the decision log (rows that should not be
there). Markers are pruned (``xa.prune_markers``) below a horizon the sink database records; a
participant at or below it cannot be told apart any more, and is reported as not checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from eo_jobs.audit.evidence import LoggedDecision, SinkEvidence
from eo_jobs.audit.model import Check, Violation
from eo_jobs.protocol.gid import Gid
from eo_jobs.protocol.xa import MARKER_RETENTION_SECONDS

PRUNABLE_AFTER_SECONDS = MARKER_RETENTION_SECONDS - 3600.0
"""A marker is pruned only once it is ``MARKER_RETENTION_SECONDS`` old; it is written when its
participant prepares, before the decision, by less than the hour this leaves for a batch's
writing. A participant of a batch decided more recently than this cannot have lost its marker
to pruning, whatever the prune horizon says (a second guard beside the horizon, which is kept
per streaming query)."""


@dataclass
class ParticipantFindings:
    """What the participants check found."""

    violations: list[Violation] = field(default_factory=list)
    pending: dict[str, list[int]] = field(default_factory=dict)
    """Query token -> batches with a participant still prepared (looked at again next pass)."""
    unverifiable: list[str] = field(default_factory=list)
    """Participants that could not be checked, with the reason."""
    rows: dict[tuple[str, int, str], int] = field(default_factory=dict)
    """(query token, batch, sink token) -> rows its committed participants wrote."""
    complete: set[tuple[str, int, str]] = field(default_factory=set)
    """(query token, batch, sink token) whose every participant's marker was found."""
    prepared_seen: int = 0
    without_participants: list[int] = field(default_factory=list)


def check_participants(
    decisions: Sequence[LoggedDecision],
    positions: Mapping[str, int],
    sinks: Mapping[str, SinkEvidence],
    now: datetime,
    bound_seconds: float,
) -> ParticipantFindings:
    """Check every participant of the decisions above each query's position.

    ``sinks`` maps a sink's gid token to what its database holds.
    """
    out = ParticipantFindings()
    for decision in decisions:
        token = decision.token
        if decision.batch_id <= positions.get(token, -1):
            continue
        if not decision.participants:
            if decision.rows_written:
                out.without_participants.append(decision.batch_id)
            continue
        total = 0
        every = True
        missing_sinks: set[str] = set()
        seen_sinks: set[str] = set()
        for gid in decision.participants:
            parsed = Gid.parse(gid)
            if parsed is None:
                every = False
                continue  # the decision-log check names it
            sink = sinks.get(parsed.sink)
            if sink is None or not sink.has_markers:
                every = False
                missing_sinks.add(parsed.sink)
                out.unverifiable.append(
                    f"{gid} (batch {decision.batch_id}): no audited database holds sink "
                    f"{parsed.sink}'s markers (a removed sink, or one not given to the audit)"
                )
                continue
            key = (token, decision.batch_id, parsed.sink)
            seen_sinks.add(parsed.sink)
            marker = sink.markers.get(gid)
            if marker is not None:
                total += marker.rows
                out.rows[key] = out.rows.get(key, 0) + marker.rows
                continue
            every = False
            missing_sinks.add(parsed.sink)
            if gid in sink.prepared:
                out.prepared_seen += 1
                out.pending.setdefault(token, []).append(decision.batch_id)
                age = (now - decision.decided_at).total_seconds()
                if age > bound_seconds:
                    out.violations.append(
                        Violation(
                            Check.PREPARED,
                            decision.batch_id,
                            decision.query_id,
                            f"{gid} is still prepared {age:.0f} s after its batch was decided "
                            f"(bound {bound_seconds:.0f} s): its rows are invisible and its "
                            "locks held until recovery commits it",
                        )
                    )
            elif (
                (horizon := sink.horizons.get(parsed.query)) is not None
                and decision.batch_id <= horizon
                and (now - decision.decided_at).total_seconds() > PRUNABLE_AFTER_SECONDS
            ):
                out.unverifiable.append(
                    f"{gid} (batch {decision.batch_id}): its marker was pruned (markers of its "
                    f"query are pruned through batch {horizon} in its database)"
                )
            else:
                out.violations.append(
                    Violation(
                        Check.PARTICIPANTS,
                        decision.batch_id,
                        decision.query_id,
                        f"{gid} is named by the decision but neither committed (no marker) nor "
                        "prepared: it was rolled back, and the batch's rows in that sink are lost",
                    )
                )
        out.complete.update(
            (token, decision.batch_id, s) for s in seen_sinks if s not in missing_sinks
        )
        if every and total != decision.rows_written:
            out.violations.append(
                Violation(
                    Check.PARTICIPANTS,
                    decision.batch_id,
                    decision.query_id,
                    f"the decision records {decision.rows_written} rows written but its "
                    f"participants' markers add up to {total}",
                )
            )
    return out


def check_orphans(
    decisions: Sequence[LoggedDecision],
    positions: Mapping[str, int],
    upper: Mapping[str, int],
    sinks: Mapping[str, SinkEvidence],
    query_ids: Mapping[str, str],
    late: Sequence[LoggedDecision] = (),
) -> list[Violation]:
    """Markers above the position that no decision names.

    ``upper`` is, per query token, the last batch this pass read decisions up to; ``late`` are
    the decisions of the batches of markers above it, read after the markers: a marker above
    ``upper`` that they name is of a batch decided meanwhile (the next pass audits it), one
    they do not name has no decision. A query token with no decision at all has every marker
    orphaned (its decisions were deleted, e.g. by ``eo forget-query``).
    """
    named: dict[tuple[str, int], set[str]] = {}
    for decision in (*decisions, *late):
        named[(decision.token, decision.batch_id)] = set(decision.participants)
    grouped: dict[tuple[str, int], list[str]] = {}
    for sink in sinks.values():
        for marker in sink.markers.values():
            token = marker.parsed.query
            if marker.batch_id <= positions.get(token, -1):
                continue
            key = (token, marker.batch_id)
            if marker.gid not in named.get(key, set()):
                grouped.setdefault(key, []).append(marker.gid)
    found: list[Violation] = []
    for (token, batch), gids in sorted(grouped.items()):
        why = (
            "its batch has no decision"
            if (token, batch) not in named
            else "the batch's decision does not name them"
        )
        if token not in upper:
            why = "their query has no decision at all (deleted, e.g. by eo forget-query)"
        found.append(
            Violation(
                Check.ORPHAN_MARKERS,
                batch,
                query_ids.get(token, token),
                f"{len(gids)} committed participant(s) that no decision names ({why}): "
                + ", ".join(sorted(gids)[:5])
                + (" ..." if len(gids) > 5 else ""),
            )
        )
    return found
