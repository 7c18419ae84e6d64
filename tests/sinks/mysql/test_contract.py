"""A MySQL/MariaDB sink that cannot honour exactly-once is refused with the reason and the fix.

Against the real MariaDB server (``mariadb_db``). The worker's server is shared by the tests
of its process: every global setting a test changes is put back (``set_global``), and users
have names of their own, dropped at the end.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pymysql
import pytest
from pymysql.constants import ER

from eo_jobs.protocol.mysql_xa import MARKERS_DDL
from eo_jobs.sinks.mysql.contract import (
    check_contract,
    read_server,
    server_of,
    server_problems,
)
from tests.support.mariadb import MariaDbDatabase, MariaDbServer

if TYPE_CHECKING:
    from tests.support.mariadb import Connection

SetGlobal = Callable[[str, object], None]


def run(conn: Connection, statement: str, args: object = None) -> list[tuple[object, ...]]:
    with conn.cursor() as cur:
        cur.execute(statement, args)
        return list(cur.fetchall())


@pytest.fixture
def set_global(mariadb_server: MariaDbServer) -> Iterator[SetGlobal]:
    """``SET GLOBAL name = value`` for this test only: the old value is put back after."""
    saved: dict[str, object] = {}
    with mariadb_server.connect() as root:

        def set_(name: str, value: object) -> None:
            if name not in saved:
                saved[name] = run(root, f"SELECT @@GLOBAL.{name}")[0][0]
            run(root, f"SET GLOBAL {name} = %s", (value,))

        try:
            yield set_
        finally:
            for name, value in saved.items():
                run(root, f"SET GLOBAL {name} = %s", (value,))


@pytest.fixture(autouse=True)
def durable(set_global: SetGlobal) -> None:
    """The test server runs with MariaDB's default sync_binlog=0, which the two-phase check
    refuses (its own test below); the other tests start from a server that passes."""
    set_global("sync_binlog", 1)


@contextmanager
def account(server: MariaDbServer, *grants: str) -> Iterator[str]:
    """A new user (``'name'@'%'``, password ``pw``) holding ``grants`` (each a privilege
    list and an object, ``"INSERT ON db.t"``); dropped afterwards."""
    name = f"c{secrets.token_hex(4)}"
    with server.connect() as root:
        run(root, f"CREATE USER '{name}'@'%' IDENTIFIED BY 'pw'")
        try:
            for grant in grants:
                run(root, f"GRANT {grant} TO '{name}'@'%'")
            yield name
        finally:
            run(root, f"DROP USER '{name}'@'%'")


def codes(conn: Connection, table: str, **kwargs: object) -> list[str]:
    return [p.code for p in check_contract(conn, table, **kwargs)]  # type: ignore[arg-type]


def test_a_clean_innodb_table_passes_for_root_and_for_a_role_with_just_the_documented_grants(
    mariadb_server: MariaDbServer, mariadb_db: MariaDbDatabase
) -> None:
    db = mariadb_db.name
    spec: dict[str, object] = {
        "columns": ["id", "amount"],
        "mode": "upsert",
        "key_columns": ["id"],
        "audit_column": "batch",
    }
    with mariadb_db.connect() as conn:
        run(conn, "CREATE TABLE t (id BIGINT PRIMARY KEY, amount DECIMAL(18, 2), batch BIGINT)")
        assert codes(conn, "t", **spec) == []
        assert codes(conn, f"{db}.t", **spec) == []
        run(conn, MARKERS_DDL)
    grants = (f"INSERT, UPDATE ON {db}.t", f"INSERT, SELECT, UPDATE, DELETE ON {db}.eo_markers")
    with (
        account(mariadb_server, *grants) as user,
        mariadb_db.connect(user=user, password="pw") as conn,
    ):
        assert codes(conn, "t", **spec) == []


@pytest.mark.parametrize("engine", ["MyISAM", "MEMORY", "Aria"])
@pytest.mark.parametrize("two_phase", [True, False])
def test_a_table_whose_engine_ignores_transactions_is_refused_with_the_alter_table(
    mariadb_db: MariaDbDatabase, engine: str, two_phase: bool
) -> None:
    with mariadb_db.connect() as conn:
        run(conn, f"CREATE TABLE t (id BIGINT) ENGINE={engine}")
        problems = check_contract(conn, "t", columns=["id"], two_phase=two_phase)
    assert [p.code for p in problems] == ["engine"]
    assert f"uses the {engine} engine" in problems[0].message
    assert "stay in the table" in problems[0].message
    assert f"ALTER TABLE `{mariadb_db.name}`.`t` ENGINE=InnoDB" in problems[0].message


def test_a_missing_table_is_named_and_a_hidden_one_is_told_apart(
    mariadb_server: MariaDbServer, mariadb_db: MariaDbDatabase
) -> None:
    with mariadb_db.connect() as conn:
        problems = check_contract(conn, "nope")
        run(conn, "CREATE TABLE hidden (id BIGINT)")
    assert [p.code for p in problems] == ["missing-table"]
    assert f"`{mariadb_db.name}`.`nope` does not exist" in problems[0].message
    with (
        account(mariadb_server) as user,
        mariadb_db.server.connect(user=user, password="pw") as conn,
    ):
        problems = check_contract(conn, f"{mariadb_db.name}.hidden")
    assert [p.code for p in problems] == ["missing-table"]
    assert f"not visible to user '{user}'@'%'" in problems[0].message
    assert f"GRANT INSERT ON `{mariadb_db.name}`.`hidden` TO '{user}'@'%'" in problems[0].message


def test_missing_columns_are_named_with_the_alter_table_that_adds_them(
    mariadb_db: MariaDbDatabase,
) -> None:
    with mariadb_db.connect() as conn:
        run(conn, "CREATE TABLE t (ID BIGINT)")
        problems = check_contract(conn, "t", columns=["id", "amount", "day"])
    assert [p.code for p in problems] == ["missing-columns"]
    message = problems[0].message
    assert "no column(s) amount, day" in message  # "id" matches "ID": names ignore case
    assert "ADD COLUMN `amount` <type>, ADD COLUMN `day` <type>" in message


def test_a_table_without_a_database_is_refused_when_the_connection_has_none(
    mariadb_server: MariaDbServer,
) -> None:
    with mariadb_server.connect() as conn:
        assert codes(conn, "t") == ["no-database"]


def test_upsert_without_a_whole_unique_key_on_exactly_the_key_columns_is_refused(
    mariadb_db: MariaDbDatabase,
) -> None:
    with mariadb_db.connect() as conn:
        run(conn, "CREATE TABLE plain (id BIGINT, v BIGINT)")
        run(conn, "CREATE TABLE wider (a BIGINT, b BIGINT, v BIGINT, UNIQUE KEY (a, b))")
        run(conn, "CREATE TABLE prefix (name VARCHAR(40), v BIGINT, UNIQUE KEY (name(8)))")
        assert codes(conn, "plain", mode="upsert", key_columns=["id"]) == ["no-unique-key"]
        assert codes(conn, "wider", mode="upsert", key_columns=["a"])[0] == "no-unique-key"
        problems = check_contract(conn, "prefix", mode="upsert", key_columns=["name"])
        assert codes(conn, "plain", mode="upsert") == ["no-unique-key"]  # no keyColumns
        assert codes(conn, "plain", mode="append", key_columns=["id"]) == []
    assert [p.code for p in problems] == ["no-unique-key", "other-unique-key"]
    assert "ADD UNIQUE KEY (`name`)" in problems[0].message
    assert "name(8)" in problems[1].message


def test_on_duplicate_key_update_fires_on_any_unique_key_so_a_second_one_is_refused(
    mariadb_db: MariaDbDatabase,
) -> None:
    """What the check guards against, shown on the server first: a row whose key is new
    but whose email collides updates the row with the other key."""
    with mariadb_db.connect() as conn:
        run(conn, "CREATE TABLE t (id BIGINT PRIMARY KEY, email VARCHAR(50) UNIQUE, v BIGINT)")
        run(conn, "INSERT INTO t VALUES (1, 'a@x', 10)")
        run(
            conn,
            "INSERT INTO t VALUES (2, 'a@x', 20) "
            "ON DUPLICATE KEY UPDATE email = VALUES(email), v = VALUES(v)",
        )
        assert run(conn, "SELECT id, v FROM t") == [(1, 20)]  # row 2 never written
        problems = check_contract(
            conn, "t", columns=["id", "email", "v"], mode="upsert", key_columns=["id"]
        )
    assert [p.code for p in problems] == ["other-unique-key"]
    message = problems[0].message
    assert "unique key email (email)" in message
    assert "ON DUPLICATE KEY UPDATE fires on a collision with any unique key" in message
    assert f"ALTER TABLE `{mariadb_db.name}`.`t` DROP INDEX `email`" in message


def test_a_surrogate_auto_increment_key_and_a_key_holding_the_key_columns_are_allowed(
    mariadb_db: MariaDbDatabase,
) -> None:
    """An AUTO_INCREMENT value eo does not write is new on every insert, and a collision on a
    unique key that holds all key columns is a collision on the key columns: same row."""
    with mariadb_db.connect() as conn:
        run(
            conn,
            "CREATE TABLE totals (id BIGINT AUTO_INCREMENT PRIMARY KEY, merchant VARCHAR(20), "
            "day DATE, currency CHAR(3), cents BIGINT, UNIQUE KEY (merchant, day), "
            "UNIQUE KEY (day, merchant, currency))",
        )
        keys = ["merchant", "day"]
        spec: dict[str, object] = {"mode": "upsert", "key_columns": keys}
        assert codes(conn, "totals", columns=["merchant", "day", "cents"], **spec) == []
        written_id = codes(conn, "totals", columns=["id", "merchant", "day", "cents"], **spec)
        run(conn, "ALTER TABLE totals ADD UNIQUE KEY per_currency (day, currency)")
        problems = check_contract(
            conn, "totals", columns=["merchant", "day", "cents"], mode="upsert", key_columns=keys
        )
    assert written_id == ["other-unique-key"]  # eo writing the id can collide on it
    assert [p.code for p in problems] == ["other-unique-key"]  # holds "day", not "merchant"
    assert "unique key per_currency (day, currency)" in problems[0].message


def test_a_missing_version_column_is_named(mariadb_db: MariaDbDatabase) -> None:
    with mariadb_db.connect() as conn:
        run(conn, "CREATE TABLE t (id BIGINT PRIMARY KEY, v BIGINT)")
        problems = check_contract(
            conn, "t", mode="upsert", key_columns=["id"], version_column="updated_at"
        )
    assert [p.code for p in problems] == ["version-column"]
    assert "ADD COLUMN `updated_at`" in problems[0].message


@pytest.mark.parametrize(
    ("column_type", "accepted"),
    [
        ("BIGINT", True),
        ("BIGINT UNSIGNED NOT NULL", True),
        ("DECIMAL(19, 0)", True),
        ("DECIMAL(18, 0)", False),
        ("INT", False),
        ("SMALLINT NOT NULL", False),
        ("TEXT", False),
    ],
)
def test_an_audit_column_must_hold_every_batch_id(
    mariadb_db: MariaDbDatabase, column_type: str, accepted: bool
) -> None:
    with mariadb_db.connect() as conn:
        run(conn, f"CREATE TABLE t (id BIGINT, batch {column_type})")
        problems = check_contract(conn, "t", columns=["id"], audit_column="batch")
    if accepted:
        assert problems == []
        return
    assert [p.code for p in problems] == ["audit-column"]
    not_null = " NOT NULL" if "NOT NULL" in column_type else ""
    assert f"MODIFY `batch` BIGINT{not_null}" in problems[0].message


def test_a_missing_audit_column_is_named_with_the_column_to_add(
    mariadb_db: MariaDbDatabase,
) -> None:
    with mariadb_db.connect() as conn:
        run(conn, "CREATE TABLE t (id BIGINT)")
        problems = check_contract(conn, "t", columns=["id", "batch"], audit_column="batch")
    assert [p.code for p in problems] == ["audit-column"]  # not also a "missing column"
    assert "ADD COLUMN `batch` BIGINT" in problems[0].message


def test_a_role_without_insert_or_without_update_for_an_upsert_is_told_what_to_grant(
    mariadb_server: MariaDbServer, mariadb_db: MariaDbDatabase
) -> None:
    db = mariadb_db.name
    with mariadb_db.connect() as conn:
        run(conn, "CREATE TABLE t (id BIGINT PRIMARY KEY, v BIGINT, secret BIGINT)")
        run(conn, MARKERS_DDL)
    markers = f"INSERT, SELECT, UPDATE, DELETE ON {db}.eo_markers"
    with (
        account(mariadb_server, f"SELECT ON {db}.t", markers) as reader,
        mariadb_db.connect(user=reader, password="pw") as conn,
    ):
        problems = check_contract(conn, "t", columns=["id", "v"])
        # It sees every column (SELECT on the table): one it does not see is missing.
        assert codes(conn, "t", columns=["id", "nope"]) == ["missing-columns", "privilege"]
    assert [p.code for p in problems] == ["privilege"]
    assert f"lacks INSERT on `{db}`.`t`" in problems[0].message
    assert problems[0].message.endswith(f"GRANT INSERT ON `{db}`.`t` TO '{reader}'@'%'")
    with (
        account(mariadb_server, f"INSERT (id, v) ON {db}.t", markers) as inserter,
        mariadb_db.connect(user=inserter, password="pw") as conn,
    ):
        assert codes(conn, "t", columns=["id", "v"]) == []  # a column grant is enough
        problems = check_contract(conn, "t", columns=["id", "v", "secret"])
        upsert = check_contract(conn, "t", columns=["id", "v"], mode="upsert", key_columns=["id"])
    assert [p.code for p in problems] == ["privilege"]
    assert "cannot see column(s) secret of" in problems[0].message
    assert f"GRANT INSERT (`secret`) ON `{db}`.`t` TO '{inserter}'@'%'" in problems[0].message
    assert [p.code for p in upsert] == ["privilege"]
    assert f"GRANT UPDATE ON `{db}`.`t` TO '{inserter}'@'%'" in upsert[0].message


def test_the_marker_table_needs_what_eo_does_with_it_or_create_when_it_is_missing(
    mariadb_server: MariaDbServer, mariadb_db: MariaDbDatabase
) -> None:
    db = mariadb_db.name
    with mariadb_db.connect() as conn:
        run(conn, "CREATE TABLE t (id BIGINT)")
    table = f"INSERT ON {db}.t"
    with account(mariadb_server, table) as user, mariadb_db.connect(user=user, password="pw") as c:
        problems = check_contract(c, "t")
    assert [p.code for p in problems] == ["privilege", "privilege"]
    assert "lacks INSERT, SELECT, DELETE, UPDATE on eo's marker table" in problems[0].message
    message = problems[1].message
    assert f"`{db}`.`eo_markers` is hidden from this user or missing, and user '{user}'" in message
    assert f"GRANT CREATE ON `{db}`.* TO '{user}'@'%'" in message
    with (
        account(mariadb_server, f"INSERT, SELECT, UPDATE, DELETE ON {db}.*") as u,
        mariadb_db.connect(user=u, password="pw") as conn,
    ):
        problems = check_contract(conn, "t")  # granted on any table, not CREATE
    assert [p.code for p in problems] == ["privilege"]
    assert f"`{db}`.`eo_markers` does not exist yet, and user '{u}'@'%'" in problems[0].message
    everything = f"INSERT, SELECT, UPDATE, DELETE, CREATE ON {db}.*"
    with (
        account(mariadb_server, everything) as user,
        mariadb_db.connect(user=user, password="pw") as conn,
    ):
        assert codes(conn, "t") == []  # may create it, and use it once created
        assert run(conn, "SHOW TABLES") == [("t",)]  # the probes created nothing
    with mariadb_db.connect() as conn:
        run(conn, MARKERS_DDL)
    with (
        account(mariadb_server, table, f"INSERT, SELECT ON {db}.eo_markers") as user,
        mariadb_db.connect(user=user, password="pw") as conn,
    ):
        problems = check_contract(conn, "t")
    assert [p.code for p in problems] == ["privilege"]
    assert "lacks DELETE, UPDATE on eo's marker table" in problems[0].message
    assert "pruning deletes old marker rows" in problems[0].message
    assert f"GRANT DELETE, UPDATE ON `{db}`.`eo_markers` TO '{user}'@'%'" in problems[0].message


def test_pruning_raises_its_horizon_with_an_upsert_so_the_marker_table_needs_update(
    mariadb_server: MariaDbServer, mariadb_db: MariaDbDatabase
) -> None:
    """Why UPDATE is in the marker table's list: the horizon row is written by
    ``INSERT ... ON DUPLICATE KEY UPDATE`` (``MySqlPreparedTransactions.prune_markers``)."""
    db = mariadb_db.name
    with mariadb_db.connect() as conn:
        run(conn, "CREATE TABLE t (id BIGINT)")
        run(conn, MARKERS_DDL)
    grants = (f"INSERT ON {db}.t", f"INSERT, SELECT, DELETE ON {db}.eo_markers")
    with (
        account(mariadb_server, *grants) as user,
        mariadb_db.connect(user=user, password="pw") as conn,
    ):
        with pytest.raises(pymysql.OperationalError) as denied:
            run(
                conn,
                "INSERT INTO `eo_markers` (gid, pipeline, batch_id, rows_written) "
                "VALUES ('h', 'p', 1, 0) ON DUPLICATE KEY UPDATE "
                "batch_id = GREATEST(batch_id, VALUES(batch_id))",
            )
        problems = check_contract(conn, "t")
    assert denied.value.args[0] == ER.TABLEACCESS_DENIED_ERROR
    assert "UPDATE command denied" in denied.value.args[1]
    assert [p.code for p in problems] == ["privilege"]
    assert "lacks UPDATE on eo's marker table" in problems[0].message


def test_on_mariadb_a_role_with_no_privilege_at_all_may_run_xa_recover(
    mariadb_server: MariaDbServer, mariadb_db: MariaDbDatabase
) -> None:
    """MySQL 8 wants XA_RECOVER_ADMIN (the probe's failure asks for it there); MariaDB has no
    such privilege and lets anyone list prepared branches (docs/mysql.md), so a USAGE-only
    role is refused for its table, never for XA RECOVER."""
    with account(mariadb_server) as user, mariadb_server.connect(user=user, password="pw") as c:
        found = codes(c, f"{mariadb_db.name}.t")
    assert found == ["missing-table"]  # (hidden from this user) and nothing about XA RECOVER


@pytest.mark.parametrize(("value", "crash"), [(2, "so an OS crash"), (0, "so any crash, even")])
def test_a_redo_log_not_flushed_at_each_prepare_and_commit_is_refused(
    mariadb_db: MariaDbDatabase, set_global: SetGlobal, value: int, crash: str
) -> None:
    with mariadb_db.connect() as conn:
        run(conn, "CREATE TABLE t (id BIGINT)")
        set_global("innodb_flush_log_at_trx_commit", value)
        problems = check_contract(conn, "t")
        skipped = check_contract(conn, "t", two_phase=False)
        set_global("innodb_flush_log_at_trx_commit", 3)  # MariaDB's "1 plus a sync": durable
        durable = check_contract(conn, "t")
    assert [p.code for p in problems] == ["innodb_flush_log_at_trx_commit"]
    assert f"innodb_flush_log_at_trx_commit is {value}" in problems[0].message
    assert crash in problems[0].message
    assert "SET GLOBAL innodb_flush_log_at_trx_commit = 1" in problems[0].message
    assert skipped == durable == []


def test_an_unsynced_or_statement_format_binary_log_is_refused_for_two_phase_only(
    mariadb_db: MariaDbDatabase, set_global: SetGlobal
) -> None:
    with mariadb_db.connect() as conn:
        run(conn, "CREATE TABLE t (id BIGINT)")
        set_global("sync_binlog", 0)  # MariaDB's default
        set_global("binlog_format", "STATEMENT")
        problems = check_contract(conn, "t")
        skipped = check_contract(conn, "t", two_phase=False)
    assert [p.code for p in problems] == ["sync_binlog", "binlog_format"]
    assert "SET GLOBAL sync_binlog = 1" in problems[0].message
    assert "sync_binlog = 1 under [mysqld]" in problems[0].message
    assert "SET GLOBAL binlog_format = 'ROW'" in problems[1].message
    assert skipped == []


def test_the_version_rule_is_mdev_742_for_mariadb_and_wl_6860_for_mysql() -> None:
    """No MariaDB before 10.5 nor any MySQL can run here (docs/mysql.md): the rule is checked
    on the variables such servers report."""

    def refused(version: str, **variables: str) -> list[str]:
        return [p.code for p in server_problems(server_of({"version": version, **variables}))]

    assert refused("10.4.32-MariaDB-log") == ["server-version"]
    assert refused("10.5.1-MariaDB") == ["server-version"]
    assert refused("10.5.2-MariaDB") == []
    assert refused("11.4.3-MariaDB-ubu2404") == []
    assert refused("5.7.6-m16-log") == ["server-version"]
    assert refused("5.7.44-log") == []
    assert refused("8.0.36") == []
    assert refused("8.0.36", innodb_support_xa="OFF") == ["innodb_support_xa"]
    assert refused("8.0.36", innodb_support_xa="ON", log_bin="ON", sync_binlog="1") == []
    message = server_problems(server_of({"version": "10.4.32-MariaDB"}))[0].message
    assert "MariaDB 10.4.32-MariaDB" in message and "upgrade to MariaDB 10.5.2" in message


def test_the_running_server_is_read_as_mariadb_10_11(mariadb_db: MariaDbDatabase) -> None:
    with mariadb_db.connect() as conn:
        server = read_server(conn)
    assert server.mariadb and server.version is not None and server.version >= (10, 11, 0)
    assert server.settings["log_bin"] == "ON" and "innodb_support_xa" not in server.settings
