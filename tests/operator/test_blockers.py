"""What keeps a pipeline from starting is classified from the real errors (libpq's parser, a
real refused connection) and told without secret text; every reason has a runbook entry."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pymysql
import pytest

from eo_jobs.pgserver import free_port
from eo_jobs.protocol.mysql_xa import connect
from eo_operator.blockers import REASONS, classify, redact, safe_message
from tests.support.mariadb import MariaDbServer

SECRET = "hunter2-very-secret"


def _error(dsn: str) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as caught:
        psycopg.connect(dsn, connect_timeout=5).close()
    return caught.value


@pytest.mark.parametrize(
    "dsn",
    [
        f"host=127.0.0.1 password={SECRET} oops",
        f"host=127.0.0.1 password='{SECRET}' port=notaport",
        f"postgresql://u:{SECRET}@[bad/db",
    ],
)
def test_a_dsn_that_does_not_parse_is_reported_without_the_parser_s_words(dsn: str) -> None:
    error = _error(dsn)
    blocker = classify(error, "ns")
    assert blocker is not None and blocker.reason == "DsnInvalid"
    for text in (blocker.text, safe_message(error)):
        assert SECRET not in text and "oops" not in text


def test_a_refused_connection_is_unreachable_and_keeps_no_password() -> None:
    error = _error(f"host=127.0.0.1 port={free_port()} user=eo password={SECRET} dbname=x")
    blocker = classify(error, "ns")
    assert blocker is not None and blocker.reason == "SinkUnreachable"
    assert SECRET not in blocker.message


def test_password_forms_are_scrubbed() -> None:
    assert SECRET not in redact(f"dsn postgresql://eo:{SECRET}@db:5432/x and password={SECRET}")


def test_every_blocker_reason_has_a_runbook_entry(repo_root: Path) -> None:
    runbook = (repo_root / "docs" / "runbook.md").read_text()
    assert [r for r in sorted(REASONS) if f"| `{r}` (" not in runbook] == []


def test_a_login_the_server_refuses_is_an_auth_failure_without_the_password(pg_dsn: str) -> None:
    params = psycopg.conninfo.conninfo_to_dict(pg_dsn)
    dsn = f"host={params['host']} port={params['port']} user=nobody password={SECRET} dbname=x"
    blocker = classify(_error(dsn), "ns")
    assert blocker is not None and blocker.reason == "SinkAuthFailed"
    assert SECRET not in blocker.message


def _mysql_error(dsn: str) -> pymysql.Error:
    with pytest.raises(pymysql.Error) as caught:
        connect(dsn, connect_timeout=5).close()
    return caught.value


def test_a_mysql_sink_that_does_not_answer_is_unreachable_without_the_password() -> None:
    blocker = classify(_mysql_error(f"mysql://eo:{SECRET}@127.0.0.1:{free_port()}/x"), "ns")
    assert blocker is not None and blocker.reason == "SinkUnreachable"
    assert SECRET not in blocker.message and "3306/database" in blocker.fix


def test_a_mysql_login_the_server_refuses_is_an_auth_failure_without_the_password(
    mariadb_server: MariaDbServer,
) -> None:
    dsn = f"mysql://nobody:{SECRET}@127.0.0.1:{mariadb_server.port}/mysql"
    blocker = classify(_mysql_error(dsn), "ns")
    assert blocker is not None and blocker.reason == "SinkAuthFailed"
    assert SECRET not in blocker.message


def test_a_mysql_database_that_does_not_exist_is_unreachable(
    mariadb_server: MariaDbServer,
) -> None:
    dsn = f"mysql://root@127.0.0.1:{mariadb_server.port}/no_such_database"
    blocker = classify(_mysql_error(dsn), "ns")
    assert blocker is not None and blocker.reason == "SinkUnreachable"
    assert "no_such_database" in blocker.message
