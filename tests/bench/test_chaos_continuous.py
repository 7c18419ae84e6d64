"""The chaos run's continuous audit: eo's auditor pass after pass from a kept position, each
violation counted once however many passes see it, a pass that cannot reach its database
counted as a failed pass and not as a violation. Real decision logs (tests/audit/harness)."""

from __future__ import annotations

from bench.chaos.continuous import ContinuousAudit
from tests.audit import harness as h

from eo_jobs.audit import AuditTarget, SinkTarget


def test_passes_from_a_kept_position_audit_each_batch_and_find_nothing_untampered(
    pg_dsn: str,
) -> None:
    auditor = ContinuousAudit(h.target(pg_dsn, batch_column="batch_id"))
    coord = h.drive(pg_dsn, range(3))
    auditor.run_pass()
    h.drive(pg_dsn, range(3, 5), coord=coord)
    auditor.run_pass()

    assert (auditor.passes, auditor.batches, auditor.errors) == (2, 5, 0)
    assert not auditor.violations
    assert auditor.position is not None and auditor.position.batches == {h.harness_token(): 4}


def test_a_violation_seen_again_by_later_passes_counts_once(pg_dsn: str) -> None:
    # A second sink database that is down: each pass keeps its position (its batches are
    # audited again by the next), so every pass sees the same deleted decision again.
    good = h.target(pg_dsn)
    down = SinkTarget("mirror", "postgresql://eo@127.0.0.1:1/none", "public.mirror")
    auditor = ContinuousAudit(AuditTarget(good.pipeline, pg_dsn, (*good.sinks, down)))
    h.drive(pg_dsn, range(4))
    h.sql(pg_dsn, "DELETE FROM eo.decisions WHERE batch_id = 1")

    first = auditor.run_pass()
    auditor.run_pass()
    auditor.run_pass()

    assert first is not None and first.violations  # what the first pass found ...
    found = {f"audit_{v.check}" for v in first.violations}
    assert auditor.violations == dict.fromkeys(found, 1)  # ... counted once, after three passes
    assert auditor.passes == 3 and auditor.position == first.start


def test_a_pass_that_cannot_reach_its_database_is_a_failed_pass_not_a_violation(
    pg_dsn: str,
) -> None:
    good = h.target(pg_dsn)
    unreachable = AuditTarget(good.pipeline, "postgresql://eo@127.0.0.1:1/none", good.sinks)
    auditor = ContinuousAudit(unreachable)

    assert auditor.run_pass() is None
    assert (auditor.passes, auditor.errors, sum(auditor.violations.values())) == (0, 1, 0)
