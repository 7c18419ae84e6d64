"""Ordinary MySQL/MariaDB failures (a MySQL control database or sink) are one line with the
exit code of their class, as PostgreSQL's are (``exits.explain``), on a real MariaDB server."""

from __future__ import annotations

import pymysql
import pytest

from eo_jobs.cli import main
from eo_jobs.exits import EXIT_DATABASE, EXIT_FAILED, EXIT_PRIVILEGE, EXIT_USAGE, explain
from tests.support.mariadb import MariaDbDatabase


def _error(work: object) -> pymysql.MySQLError:
    try:
        work()  # type: ignore[operator]
    except pymysql.MySQLError as exc:
        return exc
    raise AssertionError("no error")


def test_a_missing_grant_a_lost_server_and_a_refusal_each_have_their_exit_code(
    mariadb_db: MariaDbDatabase,
) -> None:
    admin = mariadb_db.connect()
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE eo_fence (pipeline VARCHAR(10) PRIMARY KEY) ENGINE=InnoDB")
        cur.execute("DROP USER IF EXISTS 'eo_nobody'@'%'")
        cur.execute("CREATE USER 'eo_nobody'@'%' IDENTIFIED BY 'pw'")
        cur.execute(f"GRANT SELECT ON `{mariadb_db.name}`.eo_fence TO 'eo_nobody'@'%'")
    limited = mariadb_db.connect(user="eo_nobody", password="pw")

    def write() -> None:
        with limited.cursor() as cur:
            cur.execute("INSERT INTO eo_fence VALUES ('p')")

    code, line = explain(_error(write), "recover", ["eo_nobody"]) or (0, "")
    assert code == EXIT_PRIVILEGE and "1142" in line and "eo_nobody" in line and "GRANT" in line

    with limited.cursor() as cur:
        cur.execute("SELECT CONNECTION_ID()")
        (mine,) = cur.fetchone() or (0,)
    with admin.cursor() as cur:
        cur.execute(f"KILL CONNECTION {int(mine)}")
    lost = _error(lambda: limited.cursor().execute("SELECT 1"))
    code, line = explain(lost, "run") or (0, "")
    assert code == EXIT_DATABASE and "server is up" in line and "eo run" in line

    refused = _error(lambda: admin.cursor().execute("SELEC 1"))
    code, line = explain(refused, "run") or (0, "")
    assert code == EXIT_FAILED and "1064" in line and "\n" not in line
    admin.close()


@pytest.mark.parametrize("code", [1045, 2003])
def test_a_refused_login_or_connection_is_a_database_that_cannot_be_reached(code: int) -> None:
    explained = explain(pymysql.err.OperationalError(code, "nope"), "sweep")
    assert explained is not None and explained[0] == EXIT_DATABASE


def test_eo_report_on_a_mysql_decision_log_says_it_reads_postgresql_only(
    mariadb_db: MariaDbDatabase,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("EO_SINK_LEDGER_DSN", mariadb_db.dsn)
    args = ["report", "--pipeline", "ns/p", "--sink", f"ledger={mariadb_db.name}.ledger"]
    assert main([*args, "--from", "2026-01-01T00:00:00+00:00", "--to", "2026-01-02"]) == EXIT_USAGE
    line = capsys.readouterr().err.strip()
    assert "PostgreSQL control database only" in line and "eo audit" in line and "\n" not in line
