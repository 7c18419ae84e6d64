"""Through real crashes (a driver process SIGKILLed at each crash point, then recovery by a
new epoch) and a zombie, an untampered pipeline audits clean with its checks run."""

from __future__ import annotations

import pytest

from eo_jobs.audit import Check, Status, audit
from eo_jobs.protocol.errors import FencedError
from tests.audit import harness as h
from tests.protocol import harness as ph

POINTS = ["after-some-prepared", "before-decision", "after-decision", "after-some-commits",
          "after-commits"]  # fmt: skip


@pytest.mark.parametrize("point", POINTS)
def test_a_crash_and_its_recovery_audit_clean(pg_dsn: str, point: str) -> None:
    ph.create_table(pg_dsn)
    assert ph.run_in_child(pg_dsn, 1, range(4), point, fault_batch=2) == -9
    assert ph.run_in_child(pg_dsn, 2, range(4), None) == 0
    assert ph.audit(pg_dsn, range(4)).duplicates == 0  # the harness's own ground truth
    result = audit(h.target(pg_dsn, batch_column="batch_id"))
    assert result.ok, result.violations
    assert result.batches == 4
    ran = {c.check: c.status for c in result.checks}
    assert ran[Check.PARTICIPANTS] is Status.RAN and ran[Check.TABLE_COUNT] is Status.RAN
    assert ran[Check.BATCH_COLUMN] is Status.RAN
    # The harness records offsets that are not Spark's: the audit says it could not read them.
    assert ran[Check.SOURCE_COVERAGE] is Status.PARTIAL


def test_a_zombie_fenced_at_its_decision_leaves_nothing_to_report(pg_dsn: str) -> None:
    zombie = h.drive(pg_dsn, range(2), epoch=1)
    assert zombie.begin(ph.QUERY, 2, h.kafka(2)) is None
    rows = ph.batch_rows(2)
    prepared = [ph.prepare_task(zombie, pg_dsn, 2, task, rows) for task in range(ph.TASKS)]
    live = ph.coordinator(pg_dsn, 2)
    live.startup()  # fences epoch 1 and rolls back its undecided batch 2
    h.drive(pg_dsn, range(2, 4), coord=live)
    with pytest.raises(FencedError):
        zombie.decide(ph.QUERY, 2, prepared, h.kafka(2), 1.0)
    result = audit(h.target(pg_dsn, batch_column="batch_id"))
    assert result.ok, result.violations
    assert [c.status for c in result.checks if c.check is Check.SOURCE_COVERAGE] == [Status.RAN]
