"""Markers outlive the audit: the driver's prune stops at the audited position, within bounds."""

from __future__ import annotations

import psycopg
import pytest

from eo_jobs.protocol.control import MARKER_RETENTION_BATCHES
from eo_jobs.protocol.coordinator import Coordinator
from eo_jobs.protocol.gid import query_token
from eo_jobs.protocol.retention import (
    AUDIT_HOLD_BATCHES,
    audited_batch,
    forget_audited,
    prune_below,
    record_audited,
)
from tests.protocol import harness

TOKEN = query_token(harness.QUERY)


@pytest.mark.parametrize(
    ("committing", "audited", "below"),
    [
        (5000, None, 5000 - MARKER_RETENTION_BATCHES),  # no audit: as before
        (5000, 1200, 1201),  # the audit is behind: keep what it has not audited
        (5000, 4990, 5000 - MARKER_RETENTION_BATCHES),  # the audit is ahead: the usual bound
        (500_000, 3, 500_000 - AUDIT_HOLD_BATCHES),  # far behind: held no further than the cap
    ],
)
def test_the_prune_bound_is_the_lower_of_retention_and_the_audit_within_the_cap(
    committing: int, audited: int | None, below: int
) -> None:
    assert prune_below(committing, audited) == below


def _age(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE eo.markers SET created_at = created_at - interval '2 days'")


def _marked_batches(dsn: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT DISTINCT batch_id FROM eo.markers WHERE gid LIKE 'eo1:%' ORDER BY 1"
        ).fetchall()
    return [int(r[0]) for r in rows]


def _old_batches(dsn: str) -> Coordinator:
    """Batches 0..3 decided, their markers two days old (old enough to prune)."""
    harness.create_table(dsn)
    coord = harness.coordinator(dsn, 1)
    coord.startup()
    for batch in range(4):
        harness.run_batch(coord, dsn, batch)
    _age(dsn)
    return coord


def _audited(dsn: str) -> int | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return audited_batch(conn, harness.PIPELINE, TOKEN)


def test_the_drivers_prune_keeps_the_markers_the_audit_has_not_reached(pg_dsn: str) -> None:
    coord = _old_batches(pg_dsn)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        record_audited(conn, harness.PIPELINE, {TOKEN: 1})
    # Batch 1100 is 1,000 past every marker and a prune batch (every 100).
    harness.run_batch(coord, pg_dsn, 1100)
    assert _marked_batches(pg_dsn) == [2, 3, 1100]


def test_without_an_audit_position_the_prune_is_what_it_was(pg_dsn: str) -> None:
    coord = _old_batches(pg_dsn)
    assert _audited(pg_dsn) is None  # no table at all
    harness.run_batch(coord, pg_dsn, 1100)
    assert _marked_batches(pg_dsn) == [1100]


def test_a_stale_or_forgotten_audit_position_holds_nothing_back(pg_dsn: str) -> None:
    harness.create_table(pg_dsn)
    coord = harness.coordinator(pg_dsn, 1)
    coord.startup()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        record_audited(conn, harness.PIPELINE, {TOKEN: 7})
        record_audited(conn, harness.PIPELINE, {TOKEN: 9})  # a later pass moves it
    assert _audited(pg_dsn) == 9
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE eo.audited SET audited_at = audited_at - interval '8 days'")
    assert _audited(pg_dsn) is None  # the audit stopped a week ago
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        record_audited(conn, harness.PIPELINE, {TOKEN: 9})
        forget_audited(conn, harness.PIPELINE)  # switched off
    assert _audited(pg_dsn) is None
