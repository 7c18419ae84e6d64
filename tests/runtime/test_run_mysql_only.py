"""`eo run` of a pipeline whose only database is MariaDB: files -> MariaDB through XA branches,
decided in the same MariaDB database (no ``spec.control``: the first sink's database holds the
fence and the decision log), with real SIGKILLs inside the writer tasks and after the decision,
and no PostgreSQL reachable through the driver's environment at all."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from tests.runtime import harness
from tests.runtime.test_run_mysql import MYSQL_DDL, exact, mysql_audit, mysql_sink
from tests.support.mariadb import MariaDbDatabase

from eo_jobs.audit import Check, Status, audit
from eo_jobs.audit.targets import target_for
from eo_jobs.protocol.mysql_control import MySqlControlStore
from eo_jobs.spec.loading import load_pipeline

pytestmark = pytest.mark.spark


def mysql_only_pipeline(work: Path, db: MariaDbDatabase) -> Path:
    """``harness.files_pipeline`` with its only sink in MariaDB and no ``spec.control``."""
    spec = harness.files_pipeline(work)
    text = spec.read_text()
    start = text.index("    - name: orders\n")
    end = text.index("  checkpoint:")
    text = text[:start] + mysql_sink(db) + text[end:]
    assert "TEST_DSN" not in text and "control:" not in text
    spec.write_text(text)
    return spec


def test_a_mysql_only_pipeline_is_exact_through_kills_with_no_postgresql_anywhere(
    tmp_path: Path, mariadb_db: MariaDbDatabase
) -> None:
    conn = mariadb_db.connect()
    with conn.cursor() as cur:
        cur.execute(MYSQL_DDL)
    conn.close()
    truth = harness.write_files(tmp_path / "in", files=6, per_file=60)
    spec = mysql_only_pipeline(tmp_path, mariadb_db)
    env = {"MYSQL_DSN": mariadb_db.dsn}
    runs = [
        {"EO_FAULT_POINT": "after-some-prepared", "EO_FAULT_BATCH": "1"},
        {"EO_FAULT_POINT": "after-decision", "EO_FAULT_BATCH": "2"},
    ]
    for epoch, fault in enumerate(runs, start=1):
        code, out = harness.run(spec, epoch, "", extra_env={**env, **fault}, without_postgres=True)
        assert code == -signal.SIGKILL, out
    code, out = harness.run(spec, len(runs) + 1, "", extra_env=env, without_postgres=True)
    assert code == 0, out
    # The batch decided before the second kill is committed by the third driver's recovery.
    assert '"event": "recovered"' in out and '"batch": 2, "decided_by_epoch": 2' in out, out
    assert mysql_audit(mariadb_db, truth) == exact(truth)

    # The decision log and the fence are in the MariaDB database itself.
    control = MySqlControlStore(mariadb_db.dsn)
    try:
        fence = control.fence("test/orders")
        assert fence is not None and fence.epoch == len(runs) + 1
        decided = control.recent_decisions("test/orders", 100)
        assert decided and {d.epoch for d in decided} <= {1, 2, 3}
        assert sum(d.rows_written for d in decided) == len(truth.valid)
    finally:
        control.close()

    # The continuous audit reads the MySQL control tables too: clean, then a row deleted
    # behind eo's back is a table-count violation of the sink.
    target = target_for(
        load_pipeline(spec),
        {"orders": mariadb_db.dsn},
        mariadb_db.dsn,
        append_only=["orders"],
        checkpoint=str(tmp_path / "checkpoint"),
    )
    clean = audit(target)
    assert clean.ok, clean.violations
    ran = {(c.check, c.status) for c in clean.checks}
    assert (Check.TABLE_COUNT, Status.RAN) in ran and (Check.PARTICIPANTS, Status.RAN) in ran
    conn = mariadb_db.connect()
    with conn.cursor() as cur:
        cur.execute("DELETE FROM orders LIMIT 1")
    conn.close()
    broken = audit(target)
    assert [v.check for v in broken.violations] == [Check.TABLE_COUNT], broken.violations
