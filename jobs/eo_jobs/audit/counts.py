"""Sink tables against the markers: the rows the table holds are the rows eo committed.

A participant's rows and its marker commit in one transaction, so in any snapshot of a sink
database a table that only this pipeline appends to holds exactly

    rows accounted for at the last position + rows of the markers above it.

A row deleted, or a row inserted by anything but a decided participant (a row inserted twice),
breaks the equation. That is only true of an append-only table with eo as its only writer, which
eo cannot see: the person or operator running the audit declares it (``SinkTarget.append_only``),
and without the declaration the check says it did not run. With a column holding each row's
batch id, the same comparison is made per batch, which names the batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from eo_jobs.audit import participants
from eo_jobs.audit.evidence import SinkEvidence
from eo_jobs.audit.model import Check, CheckRun, Position, SinkTarget, Status, Violation
from eo_jobs.protocol.gid import sink_token

_EXTRA = "inserted by something other than a decided participant (e.g. a row inserted twice)"


def _marker_rows(
    evidence: SinkEvidence, above: Mapping[str, int], default: Mapping[str, int]
) -> int:
    """Rows of the markers above each query's batch in ``above`` (else in ``default``)."""
    return sum(
        m.rows
        for m in evidence.markers.values()
        if m.batch_id > above.get(m.parsed.query, default.get(m.parsed.query, -1))
    )


def few(batches: Sequence[int]) -> str:
    """Up to ten batch ids, and how many more."""
    shown = ", ".join(str(b) for b in batches[:10])
    return shown + (f" (+{len(batches) - 10} more)" if len(batches) > 10 else "")


def table_gate(
    evidence: SinkEvidence,
    start: Position,
    tokens: Iterable[str],
    unmarked: Iterable[int],
    oldest_seconds: float | None,
    *,
    known: bool,
    now: str,
) -> tuple[str | None, bool]:
    """Whether a table-wide check (the row count, the sums) can compare the table with the
    markers in this pass: (why not, or None when it can; whether its baseline is zero).

    The same facts decide it for any measure of the table: batches without markers cannot be
    accounted for; without a baseline kept by the last pass (``known``) only a table audited
    from its first batch with every marker still there starts from zero; markers pruned past
    the position leave batches unaccounted for. ``now`` names the table's measure as it is,
    which becomes the next pass's baseline.
    """
    waiting = sorted(unmarked)
    if waiting:
        return (
            f"batches {few(waiting)} wrote rows without participants (at-least-once or "
            "idempotent), which commit no markers to account for",
            False,
        )
    horizon = max(evidence.horizons.values(), default=None)
    zero = False
    if not known:
        from_start = not any(batch >= 0 for batch in start.batches.values())
        if horizon is not None or not from_start:
            why = (
                f"markers are pruned through batch {horizon}"
                if horizon is not None
                else "this pass starts at a position"
            )
            reason = f"no baseline for this table yet ({why}): {now} is the next pass's baseline"
            return reason, False
        zero = True
    # No decision above the position: no marker above it to prune.
    prunable = oldest_seconds is not None and oldest_seconds > participants.PRUNABLE_AFTER_SECONDS
    behind = [
        t
        for t in tokens
        if (h := evidence.horizons.get(t)) is not None and start.batch(t) < h and prunable
    ]
    if behind:
        return (
            f"markers were pruned through batch {max(evidence.horizons[t] for t in behind)}, "
            f"past the last audited batch {min(start.batch(t) for t in behind)}: audits must run "
            f"more often than markers are kept (1,000 batches and a day); {now} is the next "
            "pass's baseline",
            False,
        )
    return None, zero


def check_count(
    target: SinkTarget,
    evidence: SinkEvidence,
    start: Position,
    end: Mapping[str, int],
    tokens: Iterable[str],
    upper: int | None,
    unmarked: Iterable[int] = (),
    oldest_seconds: float | None = None,
) -> tuple[CheckRun, list[Violation], int | None]:
    """(what ran, violations, the baseline for the next pass).

    ``end`` is the new position per query token, ``tokens`` the queries this pass audited and
    ``upper`` the highest batch it read (named by a violation, since a count cannot say which
    batch a stray row belongs to). ``unmarked`` are batches that wrote rows without
    participants (at-least-once or idempotent): their rows have no markers, so the count cannot
    be checked, and the next pass starts from the count as it is. ``oldest_seconds`` is the age
    of the oldest decision above the position: markers younger than a day cannot have been
    pruned, whatever the prune horizon of their query says.
    """
    subject = f"{target.name} ({target.table})"
    if not target.append_only:
        return (
            CheckRun(
                Check.TABLE_COUNT,
                subject,
                Status.NOT_RUN,
                "the table is not declared append-only with eo as its only writer (declare it "
                "in spec.audit.appendOnly, or with eo audit --append-only SINK), so its count "
                "proves nothing",
            ),
            [],
            None,
        )
    if evidence.table_rows is None or not evidence.has_markers:
        return (
            CheckRun(Check.TABLE_COUNT, subject, Status.NOT_RUN, "no eo.markers in its database"),
            [],
            None,
        )
    rows = evidence.table_rows
    starts = dict(start.batches)
    baseline_next = rows - _marker_rows(evidence, end, starts)
    baseline = start.table_rows.get(target.name)
    why, zero = table_gate(
        evidence,
        start,
        tokens,
        unmarked,
        oldest_seconds,
        known=baseline is not None,
        now=f"its count now ({rows} rows)",
    )
    if why is not None:
        return CheckRun(Check.TABLE_COUNT, subject, Status.NOT_RUN, why), [], baseline_next
    baseline = 0 if zero else baseline
    assert baseline is not None
    expected = baseline + _marker_rows(evidence, starts, {})
    found: list[Violation] = []
    if rows != expected:
        moved = "more" if rows > expected else "fewer"
        found.append(
            Violation(
                Check.TABLE_COUNT,
                upper,
                None,
                f"{target.table} holds {rows} rows, {abs(rows - expected)} {moved} than eo "
                f"committed ({baseline} accounted for at the last position + rows of the "
                f"participants committed since = {expected}): rows were "
                + (_EXTRA if rows > expected else "deleted")
                + (f"; found at batch {upper}, the rows may belong to any batch" if upper else ""),
            )
        )
    return CheckRun(Check.TABLE_COUNT, subject, Status.RAN), found, baseline_next


def check_batch_column(
    target: SinkTarget,
    evidence: SinkEvidence,
    rows: Mapping[tuple[str, int, str], int],
    complete: Iterable[tuple[str, int, str]],
    query_ids: Mapping[str, str],
) -> tuple[CheckRun | None, list[Violation]]:
    """Rows per batch in the table against the rows its participants wrote in this sink."""
    if target.batch_column is None:
        return None, []
    subject = f"{target.name} ({target.table}.{target.batch_column})"
    if not target.per_batch:
        return (
            CheckRun(
                Check.BATCH_COLUMN,
                subject,
                Status.NOT_RUN,
                "rows per batch equal rows written only in a column eo fills (auditColumn) or a "
                "table declared append-only with eo as its only writer",
            ),
            [],
        )
    token = sink_token(target.name)
    mine = sorted(k for k in complete if k[2] == token)
    queries = {k[0] for k in mine}
    if len(queries) > 1:
        return (
            CheckRun(
                Check.BATCH_COLUMN,
                subject,
                Status.NOT_RUN,
                "batches of several streaming queries in one pass: a batch id alone does not say "
                "which query's batch a row belongs to",
            ),
            [],
        )
    found: list[Violation] = []
    for key in mine:
        query, batch, _ = key
        have = evidence.rows_by_batch.get(batch, 0)
        if have != rows.get(key, 0):
            found.append(
                Violation(
                    Check.BATCH_COLUMN,
                    batch,
                    query_ids.get(query, query),
                    f"{target.table} holds {have} rows with {target.batch_column} = {batch}, but "
                    f"the batch's participants in sink {target.name} wrote {rows.get(key, 0)}",
                )
            )
    return CheckRun(Check.BATCH_COLUMN, subject, Status.RAN), found
