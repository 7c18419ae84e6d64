"""A least-privilege driver role (no CREATE anywhere) runs the protocol once an admin set it up.

The grants are the ones docs/protocol.md ("Privileges") tells administrators to run.
"""

from __future__ import annotations

import time

import psycopg
import pytest
from psycopg import sql

from eo_jobs.protocol import registry
from eo_jobs.protocol.control import ControlStore
from tests.protocol import harness

GRANTS = (
    "GRANT USAGE ON SCHEMA eo TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA eo TO {role}",
    "GRANT USAGE ON ALL SEQUENCES IN SCHEMA eo TO {role}",
    "GRANT SELECT, INSERT ON public.ledger TO {role}",
)


@pytest.fixture
def driver_dsn(pg_dsn: str) -> str:
    """The DSN of a new LOGIN role holding only the documented grants (schema made by admin)."""
    harness.create_table(pg_dsn)
    ControlStore(pg_dsn).ensure_schema()  # the administrator's bootstrap (`eo recover` once)
    info = psycopg.conninfo.conninfo_to_dict(pg_dsn)
    role = f"driver_{info['dbname']}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        for grant in GRANTS:
            conn.execute(sql.SQL(grant).format(role=sql.Identifier(role)))
        can_create = conn.execute(
            "SELECT has_database_privilege(%s, current_database(), 'CREATE')", (role,)
        ).fetchone()
    assert can_create == (False,)
    return psycopg.conninfo.make_conninfo(pg_dsn, user=role)


def test_a_driver_role_without_create_privileges_recovers_and_commits_batches(
    driver_dsn: str, pg_dsn: str
) -> None:
    coord = harness.coordinator(driver_dsn, 1)
    registry.claim(
        coord.control, {harness.SINK: (coord.stores[harness.SINK], {"env": "DSN"})}, coord.pipeline
    )
    coord.startup()
    for batch in range(2):
        harness.run_batch(coord, driver_dsn, batch)
    # A crash leaves a prepared participant; the next epoch's start-up resolves it.
    assert coord.begin(harness.QUERY, 2, harness.offsets(2)) is None
    harness.prepare_task(coord, driver_dsn, 2, 0, harness.batch_rows(2))
    report = harness.coordinator(driver_dsn, 2).startup()
    assert len(report.rolled_back) == 1 and report.left == 0
    audit = harness.audit(pg_dsn, range(2))
    assert (audit.rows, audit.duplicates, audit.missing) == (2 * harness.ROWS_PER_BATCH, 0, 0)


def _login_role(pg_dsn: str, name: str, *grants: str) -> str:
    """A new LOGIN role with the driver's grants on schema eo, plus ``grants``; its DSN."""
    role = f"{name}_{psycopg.conninfo.conninfo_to_dict(pg_dsn)['dbname']}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        for grant in (*GRANTS[:3], *grants):
            conn.execute(sql.SQL(grant).format(role=sql.Identifier(role)))
    return psycopg.conninfo.make_conninfo(pg_dsn, user=role)


def _frozen_decision(dsn: str) -> psycopg.Connection[tuple[object, ...]]:
    """A driver frozen inside its decision transaction: it holds the fence row."""
    holder = psycopg.connect(dsn)
    holder.execute(
        "UPDATE eo.fence SET updated_at = clock_timestamp() WHERE pipeline = %s",
        (harness.PIPELINE,),
    )
    return holder


def test_ending_another_roles_frozen_decision_needs_pg_signal_backend_and_never_hangs(
    pg_dsn: str,
) -> None:
    control = ControlStore(pg_dsn)
    control.ensure_schema()
    control.raise_fence(harness.PIPELINE, 1)
    zombie = _login_role(pg_dsn, "zombie")
    plain = _login_role(pg_dsn, "plain")
    signaller = _login_role(pg_dsn, "signaller", "GRANT pg_signal_backend TO {role}")

    holder = _frozen_decision(zombie)
    started = time.monotonic()
    with pytest.raises(psycopg.errors.LockNotAvailable):
        ControlStore(plain, lock_timeout_ms=7000).raise_fence(harness.PIPELINE, 2)
    assert time.monotonic() - started < 7 + 5
    assert not holder.broken and holder.execute("SELECT 1").fetchone() == (1,)
    holder.rollback()

    holder = _frozen_decision(zombie)
    change = ControlStore(signaller, lock_timeout_ms=7000).raise_fence(harness.PIPELINE, 2)
    assert (change.previous, change.current) == (1, 2)
    with pytest.raises(psycopg.OperationalError):
        holder.execute("SELECT 1")
    assert holder.broken
