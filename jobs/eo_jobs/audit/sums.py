"""Sink tables against the sums eo computed before writing: the money in the table is the
money of the records.

For a sink with ``sumColumns`` the driver computes, in Spark, the exact sum of each such column
over the rows a batch writes to the sink and stores it with the batch's decision
(``eo.decisions.sums``: sink -> column -> decimal text, or null when no comparable sum exists,
e.g. records the database refused went to dead letters). Two checks read it:

* per batch, in an append-only table with a batch column: the table's sum of each column over
  the rows of batch N equals the sum recorded for batch N (names the batch);
* table-wide, in an append-only table or one eo accumulates into: as the row count in
  ``counts``, the table's sum of each column equals the sums accounted for at the last position
  plus the recorded sums of the batches whose participants are committed in the same snapshot
  (their markers are there). It sees a change in a batch audited long ago, which no per-batch
  check of this pass looks at.

Sums are compared exactly (``Decimal``): the sink contract refuses float sum columns.
"""

from __future__ import annotations

import decimal
from collections.abc import Iterable, Mapping
from decimal import Decimal

from eo_jobs.audit.counts import few, table_gate
from eo_jobs.audit.evidence import LoggedDecision, SinkEvidence
from eo_jobs.audit.model import Check, CheckRun, Position, SinkTarget, Status, Violation
from eo_jobs.protocol.gid import Gid, sink_token

EXACT = decimal.Context(
    prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN, traps=[]
)
"""Additions with no rounding (a sum of sums is as long as it needs to be)."""

Key = tuple[str, int]
"""(query token, batch id)."""

_NO_SUMS = "no sums recorded (decided by an eo older than sum columns)"
_NOT_DECLARED = "its decision records no sums for this sink (it declared no sum columns then)"
_NULL = (
    "no comparable sum (null: records its database refused went to dead letters, so the rows "
    "written are not the records summed)"
)


def recorded(
    decision: LoggedDecision | None, sink: str, columns: Iterable[str]
) -> tuple[dict[str, Decimal], None] | tuple[None, str]:
    """(column -> the sum recorded for ``sink``, None), or (None, why there is none)."""
    if decision is None:
        return None, "no decision read for it"
    if decision.sums is None:
        return None, _NO_SUMS
    if sink not in decision.sums:
        return None, _NOT_DECLARED
    per_column = decision.sums[sink]
    if per_column is None:
        return None, _NULL
    out: dict[str, Decimal] = {}
    for column in columns:
        value = per_column.get(column)
        if value is None:
            return None, f"no sum of {column} recorded"
        try:
            out[column] = Decimal(str(value))
        except decimal.InvalidOperation:
            return None, f"the recorded sum of {column} ({value!r}) is not a number"
    return out, None


def check_batch_sums(
    target: SinkTarget,
    evidence: SinkEvidence,
    decisions: Mapping[Key, LoggedDecision],
    complete: Iterable[tuple[str, int, str]],
    query_ids: Mapping[str, str],
    has_sums: bool = True,
) -> tuple[CheckRun | None, list[Violation]]:
    """Per batch, the table's sums over the rows with its batch id against the recorded sums.

    ``complete`` are the (query token, batch, sink token) whose every participant's marker was
    found (the batch-column check's set); ``has_sums``: the decision log has the sums column.
    """
    if not target.sum_columns or target.batch_column is None:
        return None, []
    subject = f"{target.name} ({target.table}.{target.batch_column}, per batch)"

    def not_run(why: str) -> tuple[CheckRun, list[Violation]]:
        return CheckRun(Check.SUM_COLUMNS, subject, Status.NOT_RUN, why), []

    if not target.per_batch:
        return not_run(
            "sums per batch equal the table's only in a column eo fills (auditColumn) or a "
            "table declared append-only with eo as its only writer"
        )
    if not has_sums:
        return not_run(_NO_COLUMN)
    columns = [c for c in target.sum_columns if c not in evidence.missing_sum_columns]
    if not columns:
        return not_run(_missing(target, evidence))
    token = sink_token(target.name)
    mine = sorted(k for k in complete if k[2] == token)
    if len({k[0] for k in mine}) > 1:
        return not_run(
            "batches of several streaming queries in one pass: a batch id alone does not say "
            "which query's batch a row belongs to"
        )
    found: list[Violation] = []
    skipped: dict[str, list[int]] = {}
    for query, batch, _ in mine:
        sums, why = recorded(decisions.get((query, batch)), target.name, columns)
        if sums is None:
            skipped.setdefault(why or "", []).append(batch)
            continue
        have = evidence.sums_by_batch.get(batch, {})
        for column in columns:
            table = have.get(column, Decimal(0))
            if table != sums[column]:
                found.append(
                    Violation(
                        Check.SUM_COLUMNS,
                        batch,
                        query_ids.get(query, query),
                        f"{target.table}: sum({column}) over the rows with "
                        f"{target.batch_column} = {batch} is {table}, but eo computed "
                        f"{sums[column]} from the batch's records before writing them "
                        f"(difference {EXACT.subtract(table, sums[column]):+f}): rows of the "
                        "batch were changed, deleted or added after eo committed them",
                    )
                )
    detail = "; ".join(
        [f"batches {few(batches)} not checked: {why}" for why, batches in skipped.items()]
        + ([_missing(target, evidence)] if evidence.missing_sum_columns else [])
    )
    status = Status.PARTIAL if detail else Status.RAN
    return CheckRun(Check.SUM_COLUMNS, subject, status, detail), found


def check_table_sums(
    target: SinkTarget,
    evidence: SinkEvidence,
    start: Position,
    end: Mapping[str, int],
    decisions: Mapping[Key, LoggedDecision],
    tokens: Iterable[str],
    upper: int | None,
    unmarked: Iterable[int] = (),
    oldest_seconds: float | None = None,
    has_sums: bool = True,
) -> tuple[CheckRun | None, list[Violation], dict[str, str] | None]:
    """(what ran, violations, the baseline for the next pass), as ``counts.check_count``.

    ``decisions`` are every decision read by the pass (those of markers above the batches it
    audited too), by (query token, batch). The baseline for the next pass is the table's sums
    now minus the recorded sums of the batches committed above ``end``; when one of those has
    none (or is only part committed in this snapshot), it is the last baseline plus the sums
    of the batches up to ``end``, and None when neither is known.
    """
    if not target.sum_columns:
        return None, [], None
    subject = f"{target.name} ({target.table}, whole table)"

    def not_run(
        why: str, baseline: dict[str, str] | None = None
    ) -> tuple[CheckRun, list[Violation], dict[str, str] | None]:
        return CheckRun(Check.SUM_COLUMNS, subject, Status.NOT_RUN, why), [], baseline

    if not (target.append_only or target.accumulates):
        return not_run(
            "the table's sums move by exactly the batches' only in a table eo accumulates into "
            "(mode accumulate) or one declared append-only with eo as its only writer"
        )
    if evidence.table_sums is None or not evidence.has_markers:
        return not_run("no eo.markers in its database")
    if not has_sums:
        return not_run(_NO_COLUMN)
    if evidence.missing_sum_columns:
        return not_run(_missing(target, evidence))
    columns = list(target.sum_columns)
    table = evidence.table_sums
    starts = dict(start.batches)
    saved = start.table_sums.get(target.name)
    baseline = (
        {c: Decimal(saved[c]) for c in columns} if saved and set(columns) <= set(saved) else None
    )

    book = _Book(target.name, columns, evidence, decisions)
    baseline_next = book.baseline_next(table, baseline, starts, end)
    now = ", ".join(f"sum({c}) {_text(table[c])}" for c in columns)
    why, zero = table_gate(
        evidence,
        start,
        tokens,
        unmarked,
        oldest_seconds,
        known=baseline is not None,
        now=f"its sums now ({now})",
    )
    if why is not None:
        return not_run(why, baseline_next)
    if zero:
        baseline = {c: Decimal(0) for c in columns}
    assert baseline is not None
    since, gaps = book.total(book.committed(starts, {}))
    if gaps:
        return not_run(
            "; ".join(f"batches {few(b)}: {why}" for why, b in gaps.items())
            + ": the table's sums cannot be accounted for in this pass"
            + (", its sums now are the next pass's baseline" if baseline_next else ""),
            baseline_next,
        )
    found = [
        _table_violation(target, column, table[column], baseline[column], since[column], upper)
        for column in columns
        if table[column] != EXACT.add(baseline[column], since[column])
    ]
    return CheckRun(Check.SUM_COLUMNS, subject, Status.RAN), found, baseline_next


class _Book:
    """The recorded sums of the batches committed in one sink's snapshot."""

    def __init__(
        self,
        sink: str,
        columns: list[str],
        evidence: SinkEvidence,
        decisions: Mapping[Key, LoggedDecision],
    ) -> None:
        self.sink, self.columns, self.evidence, self.decisions = sink, columns, evidence, decisions

    def committed(self, above: Mapping[str, int], default: Mapping[str, int]) -> list[Key]:
        """Batches with this sink's markers above each query's batch in ``above``."""
        return sorted(
            {
                (m.parsed.query, m.batch_id)
                for m in self.evidence.markers.values()
                if m.batch_id > above.get(m.parsed.query, default.get(m.parsed.query, -1))
            }
        )

    def total(self, keys: list[Key]) -> tuple[dict[str, Decimal], dict[str, list[int]]]:
        """The recorded sums of ``keys``, and the batches with none (by reason)."""
        out = {c: Decimal(0) for c in self.columns}
        missing: dict[str, list[int]] = {}
        for key in keys:
            decision = self.decisions.get(key)
            sums, why = recorded(decision, self.sink, self.columns)
            if sums is not None and decision is not None and not _whole(decision, self.evidence):
                sums, why = None, "only part of its participants were committed in the snapshot"
            if sums is None:
                missing.setdefault(why or "", []).append(key[1])
                continue
            for column in self.columns:
                out[column] = EXACT.add(out[column], sums[column])
        return out, missing

    def baseline_next(
        self,
        table: Mapping[str, Decimal],
        baseline: Mapping[str, Decimal] | None,
        starts: Mapping[str, int],
        end: Mapping[str, int],
    ) -> dict[str, str] | None:
        """The sums batches at or below ``end`` account for: the table's now minus the batches
        committed above ``end``; else the last baseline plus the batches up to ``end``."""
        after_end, unknown = self.total(self.committed(end, starts))
        if not unknown:
            return {c: _text(EXACT.subtract(table[c], after_end[c])) for c in self.columns}
        if baseline is None:
            return None
        between = [
            k for k in self.committed(starts, {}) if k[1] <= end.get(k[0], starts.get(k[0], -1))
        ]
        moved, gaps = self.total(between)
        if gaps:
            return None
        return {c: _text(EXACT.add(baseline[c], moved[c])) for c in self.columns}


def _table_violation(
    target: SinkTarget,
    column: str,
    found: Decimal,
    baseline: Decimal,
    since: Decimal,
    upper: int | None,
) -> Violation:
    expected = EXACT.add(baseline, since)
    diff = EXACT.subtract(found, expected)
    return Violation(
        Check.SUM_COLUMNS,
        upper,
        None,
        f"{target.table}: sum({column}) is {_text(found)}, {_text(EXACT.abs(diff))} "
        f"{'more' if diff > 0 else 'less'} than eo committed ({_text(baseline)} accounted for "
        f"at the last position + {_text(since)} eo computed for the batches committed since = "
        f"{_text(expected)}): rows were changed, deleted or added by something other than eo"
        + (
            f"; found at batch {upper}, the difference may belong to any batch"
            if upper is not None
            else ""
        ),
    )


_NO_COLUMN = "eo.decisions has no sums column: its decisions were written by an eo without sums"


def _whole(decision: LoggedDecision, evidence: SinkEvidence) -> bool:
    """Every participant the decision names in this sink has its marker in the snapshot."""
    token = sink_token(evidence.sink)
    for gid in decision.participants:
        parsed = Gid.parse(gid)
        if parsed is not None and parsed.sink == token and gid not in evidence.markers:
            return False
    return True


def _missing(target: SinkTarget, evidence: SinkEvidence) -> str:
    return f"{target.table} has no column {', '.join(evidence.missing_sum_columns)}"


def _text(value: Decimal) -> str:
    """Decimal text, never in exponent notation (what ``Position.table_sums`` keeps)."""
    return f"{value:f}"
