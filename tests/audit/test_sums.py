"""The sum-columns check against real decision logs carrying the sums a driver records: a
ledger (append-only, with a batch column) and a totals table eo accumulates into, damaged after
the fact. Per batch it names the batch; table-wide it sees damage in batches audited long ago,
from the baseline the last pass kept."""

from __future__ import annotations

from eo_jobs.audit import (
    AuditResult,
    AuditTarget,
    Check,
    CheckRun,
    Position,
    Status,
    Violation,
    audit,
)
from tests.audit import harness as h
from tests.protocol import harness as ph


def _both(dsn: str) -> AuditTarget:
    """The ledger (append-only, batch column, amount_cents summed) and the totals sink."""
    return h.target(dsn, batch_column="batch_id", sum_columns=("amount_cents",), totals=True)


def _runs(result: AuditResult) -> dict[str, CheckRun]:
    """The sum-columns runs by subject: 'ledger per batch', 'ledger', 'totals'."""
    out: dict[str, CheckRun] = {}
    for run in result.checks:
        if run.check is Check.SUM_COLUMNS:
            name = run.subject.split(" ")[0]
            out[name + (" per batch" if "per batch" in run.subject else "")] = run
    return out


def _sums(result: AuditResult) -> list[Violation]:
    return [v for v in result.violations if v.check is Check.SUM_COLUMNS]


def _total(batches: range) -> str:
    return str(sum(r[2] for b in batches for r in ph.batch_rows(b)))


def test_untampered_batches_with_sums_pass_per_batch_and_table_wide(pg_dsn: str) -> None:
    h.drive(pg_dsn, range(4), sums=h.totals_sums, totals=True)
    result = audit(_both(pg_dsn))
    assert result.ok, result.violations
    runs = _runs(result)
    assert {k: r.status for k, r in runs.items()} == {
        "ledger per batch": Status.RAN,
        "ledger": Status.RAN,
        "totals": Status.RAN,
    }, runs
    assert result.end.table_sums == {
        ph.SINK: {"amount_cents": _total(range(4))},
        h.TOTALS: {"volume": _total(range(4))},
    }
    assert Position.from_json(result.end.as_json()) == result.end


def test_an_amount_changed_in_one_row_names_its_batch_and_column(pg_dsn: str) -> None:
    h.drive(pg_dsn, range(4), sums=h.totals_sums, totals=True)
    h.sql(pg_dsn, "UPDATE public.ledger SET amount_cents = amount_cents + 5 WHERE id = "
                  "(SELECT min(id) FROM public.ledger WHERE batch_id = 2)")  # fmt: skip
    result = audit(_both(pg_dsn))
    # Counts cannot see it; the sums can, per batch and table-wide.
    assert {v.check for v in result.violations} == {Check.SUM_COLUMNS}
    per_batch, table = sorted(_sums(result), key=lambda v: "over the rows with" not in v.evidence)
    assert per_batch.batch == 2 and per_batch.query == ph.QUERY
    assert "sum(amount_cents)" in per_batch.evidence and "batch_id = 2" in per_batch.evidence
    assert "(difference +5)" in per_batch.evidence
    assert table.batch == 3 and "5 more than eo committed" in table.evidence
    assert "public.ledger" in table.evidence


def test_a_row_deleted_is_named_by_the_sums_per_batch(pg_dsn: str) -> None:
    h.drive(pg_dsn, range(3), sums=h.ledger_sums)
    h.sql(pg_dsn, "DELETE FROM public.ledger WHERE id = (SELECT max(id) FROM public.ledger "
                  "WHERE batch_id = 1 AND amount_cents > 0)")  # fmt: skip
    target = h.target(pg_dsn, batch_column="batch_id", sum_columns=("amount_cents",))
    result = audit(target)
    named = [(v.batch, "over the rows with" in v.evidence) for v in _sums(result)]
    assert (1, True) in named and (2, False) in named, result.violations
    assert _runs(result)["ledger per batch"].status is Status.RAN


def test_a_totals_row_changed_after_commit_is_a_table_wide_violation(pg_dsn: str) -> None:
    h.drive(pg_dsn, range(3), sums=h.totals_sums, totals=True)
    h.sql(pg_dsn, "UPDATE public.totals SET volume = volume - 100 WHERE merchant = 'm1'")
    result = audit(h.target(pg_dsn, totals=True))
    assert [v.batch for v in _sums(result)] == [2]
    evidence = _sums(result)[0].evidence
    assert "public.totals: sum(volume)" in evidence and "100 less than eo committed" in evidence
    assert "may belong to any batch" in evidence


def test_a_later_pass_catches_damage_to_audited_batches_from_the_kept_baseline(
    pg_dsn: str,
) -> None:
    coord = h.drive(pg_dsn, range(3), sums=h.totals_sums, totals=True)
    first = audit(_both(pg_dsn))
    assert first.ok, first.violations
    h.sql(pg_dsn, "UPDATE public.ledger SET amount_cents = amount_cents * 2 WHERE id = 1001")
    h.sql(pg_dsn, "UPDATE public.totals SET volume = volume + 1 WHERE merchant = 'm0'")
    h.drive(pg_dsn, range(3, 5), coord=coord, sums=h.totals_sums, totals=True)
    later = audit(_both(pg_dsn), Position.from_json(first.end.as_json()))
    # Batch 1 is behind the position: only the table-wide sums see it, at the batch reached.
    found = {(v.batch, v.evidence.split(":")[0]) for v in _sums(later)}
    assert found == {(4, "public.ledger"), (4, "public.totals")}, later.violations
    assert "1 more than eo committed" in next(
        v.evidence for v in _sums(later) if "totals" in v.evidence
    )
    # A position without the sums' baseline (e.g. kept by an older eo): not run, and it takes
    # one, so the pass after it checks.
    old = Position(first.end.batches, first.end.table_rows)
    without = audit(_both(pg_dsn), old)
    assert _runs(without)["totals"].status is Status.NOT_RUN
    assert "no baseline" in _runs(without)["totals"].detail
    assert not _sums(without)
    h.drive(pg_dsn, range(5, 6), coord=coord, sums=h.totals_sums, totals=True)
    again = audit(_both(pg_dsn), without.end)
    assert _runs(again)["totals"].status is Status.RAN and again.ok, again.violations


def test_a_decision_without_sums_is_partial_and_names_the_batch(pg_dsn: str) -> None:
    """A batch decided by an eo older than sum columns is not checked, and the audit says so;
    the table-wide check takes its baseline from the table and checks from the next pass."""

    def older_for_batch_1(batch_id: int) -> h.BatchSums:
        return None if batch_id == 1 else h.totals_sums(batch_id)

    coord = h.drive(pg_dsn, range(3), sums=older_for_batch_1, totals=True)
    result = audit(_both(pg_dsn))
    assert result.ok, result.violations
    runs = _runs(result)
    assert runs["ledger per batch"].status is Status.PARTIAL
    assert "batches 1 not checked" in runs["ledger per batch"].detail
    assert "older than sum columns" in runs["ledger per batch"].detail
    assert runs["totals"].status is Status.NOT_RUN and "batches 1" in runs["totals"].detail
    assert result.end.table_sums[h.TOTALS] == {"volume": _total(range(3))}
    h.drive(pg_dsn, range(3, 5), coord=coord, sums=h.totals_sums, totals=True)
    h.sql(pg_dsn, "UPDATE public.totals SET volume = volume + 7 WHERE merchant = 'm2'")
    later = audit(_both(pg_dsn), result.end)
    assert _runs(later)["totals"].status is Status.RAN
    assert [(v.batch, "public.totals" in v.evidence) for v in _sums(later)] == [(4, True)]


def test_null_sums_for_a_sink_are_partial_with_the_reason(pg_dsn: str) -> None:
    def refused_in_batch_2(batch_id: int) -> h.BatchSums:
        sums = h.ledger_sums(batch_id)
        return {ph.SINK: None} if batch_id == 2 and sums else sums

    h.drive(pg_dsn, range(4), sums=refused_in_batch_2)
    target = h.target(pg_dsn, batch_column="batch_id", sum_columns=("amount_cents",))
    result = audit(target)
    assert result.ok, result.violations
    runs = _runs(result)
    assert runs["ledger per batch"].status is Status.PARTIAL
    assert "batches 2 not checked" in runs["ledger per batch"].detail
    assert "dead letters" in runs["ledger per batch"].detail
    assert runs["ledger"].status is Status.NOT_RUN and "dead letters" in runs["ledger"].detail


def test_a_decision_log_without_the_sums_column_is_not_run(pg_dsn: str) -> None:
    h.drive(pg_dsn, range(2), sums=h.ledger_sums)
    h.sql(pg_dsn, "ALTER TABLE eo.decisions DROP COLUMN sums")
    target = h.target(pg_dsn, batch_column="batch_id", sum_columns=("amount_cents",))
    result = audit(target)
    assert result.ok, result.violations
    for run in _runs(result).values():
        assert run.status is Status.NOT_RUN and "no sums column" in run.detail


def test_a_sink_that_is_neither_append_only_nor_accumulating_is_not_run(pg_dsn: str) -> None:
    h.drive(pg_dsn, range(2), sums=h.ledger_sums)
    target = h.target(
        pg_dsn, append_only=False, batch_column="batch_id", sum_columns=("amount_cents",)
    )
    runs = _runs(audit(target))
    assert {k: r.status for k, r in runs.items()} == {
        "ledger per batch": Status.NOT_RUN,
        "ledger": Status.NOT_RUN,
    }
    assert "append-only" in runs["ledger"].detail and "accumulate" in runs["ledger"].detail


def test_a_batch_column_eo_writes_is_checked_per_batch_without_the_append_only_declaration(
    pg_dsn: str,
) -> None:
    """``auditColumn``: only eo writes batch ids there, so rows and sums per batch are checked
    whatever else writes the table; the whole table's count and sums still need the
    declaration. Another writer's row (no batch id) is not a violation; an amount changed in
    an eo row is, naming its batch."""
    h.drive(pg_dsn, range(3), sums=h.ledger_sums)
    target = h.target(
        pg_dsn,
        append_only=False,
        batch_column="batch_id",
        sum_columns=("amount_cents",),
        by_eo=True,
    )
    h.sql(pg_dsn, f"INSERT INTO {ph.TABLE} (id, amount_cents) VALUES (-1, 5)")
    result = audit(target)
    assert result.ok, result.violations
    statuses = {(c.check, c.subject): c.status for c in result.checks}
    subject = f"{h.SINK} ({ph.TABLE}.batch_id)"
    assert statuses[(Check.BATCH_COLUMN, subject)] is Status.RAN
    assert _runs(result)["ledger per batch"].status is Status.RAN
    assert _runs(result)["ledger"].status is Status.NOT_RUN

    h.sql(pg_dsn, f"UPDATE {ph.TABLE} SET amount_cents = amount_cents + 1 "
                  "WHERE id = (SELECT min(id) FROM "
                  f"{ph.TABLE} WHERE batch_id = 1)")  # fmt: skip
    changed = audit(target)
    assert [(v.check, v.batch) for v in changed.violations] == [(Check.SUM_COLUMNS, 1)]


def test_old_position_json_without_sums_still_loads() -> None:
    old = {"batches": {"q": 3}, "table_rows": {"ledger": 240}}
    position = Position.from_json(old)
    assert position.table_sums == {} and position.batch("q") == 3
    kept = Position({"q": 3}, {"ledger": 240}, {"ledger": {"amount_cents": "12.50"}})
    assert Position.from_json(kept.as_json()) == kept


def test_a_batch_caught_half_committed_is_not_summed_and_the_baseline_carries_on(
    pg_dsn: str,
) -> None:
    """Phase 2 between a batch's participants when the sink is read: the table holds part of
    the batch's sum, which no recorded sum accounts for. Not run for that pass; the next pass,
    once recovery committed the rest, checks again from the carried baseline."""
    coord = h.drive(pg_dsn, range(3), sums=h.totals_sums, totals=True)
    first = audit(_both(pg_dsn))
    assert coord.begin(ph.QUERY, 3, h.kafka(3)) is None
    prepared = [ph.prepare_task(coord, pg_dsn, 3, t, ph.batch_rows(3)) for t in range(ph.TASKS)]
    prepared += [h.prepare_totals(coord, pg_dsn, 3, t) for t in range(ph.TASKS)]
    coord.decide(ph.QUERY, 3, prepared, h.kafka(3), 1.0, h.totals_sums(3))
    one = next(p.gid for p in prepared if p.sink == h.TOTALS)
    h.sql(pg_dsn, f"COMMIT PREPARED '{one}'")
    during = audit(_both(pg_dsn), first.end)
    assert during.ok, during.violations
    run = _runs(during)["totals"]
    assert run.status is Status.NOT_RUN and "only part of its participants" in run.detail
    assert during.end.table_sums[h.TOTALS] == first.end.table_sums[h.TOTALS]
    h.totals_coordinator(pg_dsn, 2)  # recovery commits the rest of batch 3
    h.sql(pg_dsn, "UPDATE public.totals SET volume = volume + 3 WHERE merchant = 'm4'")
    after = audit(_both(pg_dsn), during.end)
    assert _runs(after)["totals"].status is Status.RAN
    assert [v.evidence.split(":")[0] for v in _sums(after)] == ["public.totals"]
    assert "3 more than eo committed" in _sums(after)[0].evidence
