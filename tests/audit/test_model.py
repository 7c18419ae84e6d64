"""The result and the position are plain data the operator keeps and shows."""

from __future__ import annotations

from eo_jobs.audit import AuditResult, Check, CheckRun, Position, Status, Violation
from eo_jobs.audit.render import render
from eo_jobs.protocol.gid import query_token

Q = "3f2b0c9e-8d1a-4c6b-9e2f-0a1b2c3d4e5f"


def _result(*violations: Violation) -> AuditResult:
    return AuditResult(
        pipeline="default/ledger",
        start=Position(),
        end=Position({query_token(Q): 7}, {"ledger": 480}),
        batches=8,
        last_batch={Q: 9},
        checks=(
            CheckRun(Check.DECISION_LOG, "control database", Status.RAN),
            CheckRun(Check.TABLE_COUNT, "ledger (public.ledger)", Status.NOT_RUN, "not declared"),
        ),
        violations=violations,
    )


def test_the_position_round_trips_and_unknown_queries_start_at_minus_one() -> None:
    position = Position({query_token(Q): 7}, {"ledger": 480})
    assert Position.from_json(position.as_json()) == position
    assert Position().batch(query_token(Q)) == -1


def test_the_first_violation_is_the_lowest_batch_and_lag_counts_batches_left() -> None:
    result = _result(
        Violation(Check.TABLE_COUNT, 6, None, "count"),
        Violation(Check.PARTICIPANTS, 2, Q, "lost"),
        Violation(Check.DECISION_LOG, None, Q, "gone"),
    )
    first = result.first_violation()
    assert first is not None and first.batch == 2 and first.check is Check.PARTICIPANTS
    assert result.lag() == {Q: 2}
    assert not result.ok and [c.check for c in result.not_run()] == [Check.TABLE_COUNT]


def test_text_names_violations_and_what_did_not_run() -> None:
    text = render(_result(Violation(Check.PARTICIPANTS, 2, Q, "gid x lost")))
    assert text.startswith("audit of default/ledger: 1 VIOLATION(S) (8 batches audited")
    assert "VIOLATION participants batch 2: gid x lost" in text
    assert "NOT RUN table-count [ledger (public.ledger)]: not declared" in text
    assert render(_result()).startswith("audit of default/ledger: OK")
