"""The audit reads with the least privileges docs/install.md lists, and never writes."""

from __future__ import annotations

import psycopg
import pytest

from eo_jobs.audit import AuditTarget, Check, SinkTarget, audit
from eo_jobs.audit.evidence import reading
from tests.audit import harness as h
from tests.protocol import harness as ph


def _auditor_role(dsn: str) -> str:
    """A role with only the grants docs/install.md gives the auditor; its DSN."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        database = conn.info.dbname
        role = f"auditor_{database}"  # roles are server-wide; databases are per test
        conn.execute(f"DROP ROLE IF EXISTS {role}")
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT CONNECT ON DATABASE {database} TO {role}")
        conn.execute(f"GRANT USAGE ON SCHEMA eo TO {role}")
        conn.execute(f"GRANT SELECT ON eo.decisions, eo.fence, eo.failures, eo.markers TO {role}")
        conn.execute(f"GRANT SELECT ON {ph.TABLE} TO {role}")
    return psycopg.conninfo.make_conninfo(dsn, user=role)


def test_an_audit_runs_with_select_only_and_still_finds_damage(pg_dsn: str) -> None:
    h.drive(pg_dsn, range(3))
    limited = _auditor_role(pg_dsn)
    sink = SinkTarget(ph.SINK, limited, ph.TABLE, append_only=True, batch_column="batch_id")
    target = AuditTarget(ph.PIPELINE, limited, (sink,))
    assert audit(target).ok
    h.sql(pg_dsn, "DELETE FROM public.ledger WHERE batch_id = 1 AND id % 3 = 0")
    result = audit(target)
    assert {(v.check, v.batch) for v in result.violations} == {
        (Check.BATCH_COLUMN, 1),
        (Check.TABLE_COUNT, 2),
    }


def test_the_auditors_connections_refuse_writes(pg_dsn: str) -> None:
    h.drive(pg_dsn, range(1))
    with reading(pg_dsn) as conn, pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        conn.execute("DELETE FROM eo.markers")
