"""`eo run` as the least-privilege driver role docs/protocol.md ("Privileges") describes.

PostgreSQL checks CREATE on the schema before ``IF NOT EXISTS``, so a driver that ran
``CREATE TABLE IF NOT EXISTS`` for its dead-letter table at every start could not start as a
role without CREATE, even with the table there and INSERT granted (PostgreSQL >= 15 gives no
one but the owner CREATE on ``public``).
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from tests.runtime import harness

from eo_jobs.protocol.control import ControlStore
from eo_jobs.protocol.errors import EXIT_SINK_CONTRACT

pytestmark = pytest.mark.spark

GRANTS = (
    "GRANT USAGE ON SCHEMA eo TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA eo TO {role}",
    "GRANT USAGE ON ALL SEQUENCES IN SCHEMA eo TO {role}",
    "GRANT INSERT ON public.orders TO {role}",
)
DEAD_LETTER_DDL = (
    "CREATE TABLE public.orders_dead_letter (pipeline text NOT NULL, batch_id bigint NOT NULL, "
    "raw text, reason text NOT NULL, recorded_at timestamptz NOT NULL DEFAULT now())"
)


def _driver_role(pg_dsn: str, *, dead_letter_table: bool) -> str:
    """A LOGIN role with only the documented grants and no CREATE anywhere; its DSN."""
    harness.create_table(pg_dsn)
    ControlStore(pg_dsn).ensure_schema()  # the administrator's bootstrap
    role = f"driver_{psycopg.conninfo.conninfo_to_dict(pg_dsn)['dbname']}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        grants = list(GRANTS)
        if dead_letter_table:
            conn.execute(DEAD_LETTER_DDL)
            grants.append("GRANT INSERT ON public.orders_dead_letter TO {role}")
        for grant in grants:
            conn.execute(sql.SQL(grant).format(role=sql.Identifier(role)))
        can_create = conn.execute(
            "SELECT has_database_privilege(%s, current_database(), 'CREATE'), "
            "has_schema_privilege(%s, 'public', 'CREATE')",
            (role, role),
        ).fetchone()
    assert can_create == (False, False)
    return psycopg.conninfo.make_conninfo(pg_dsn, user=role)


def test_a_driver_role_without_create_runs_when_the_dead_letter_table_exists_with_insert(
    tmp_path: Path, pg_dsn: str
) -> None:
    driver_dsn = _driver_role(pg_dsn, dead_letter_table=True)
    truth = harness.write_files(tmp_path / "in", files=2, per_file=50)
    spec = harness.files_pipeline(tmp_path)
    code, out = harness.run(spec, 1, driver_dsn)
    assert code == 0, out
    harness.assert_exact(pg_dsn, truth)
    assert truth.malformed > 0  # the dead-letter table was written, as the driver role


def test_a_driver_role_that_cannot_create_the_missing_dead_letter_table_is_told_what_to_run(
    tmp_path: Path, pg_dsn: str
) -> None:
    driver_dsn = _driver_role(pg_dsn, dead_letter_table=False)
    harness.write_files(tmp_path / "in", files=1, per_file=10)
    spec = harness.files_pipeline(tmp_path)
    code, out = harness.run(spec, 1, driver_dsn)
    assert code == EXIT_SINK_CONTRACT, out
    assert "public.orders_dead_letter" in out and "does not exist" in out, out
    assert 'CREATE TABLE "public"."orders_dead_letter"' in out, out
    assert 'GRANT INSERT ON "public"."orders_dead_letter" TO' in out, out
    assert "Traceback" not in out, out
