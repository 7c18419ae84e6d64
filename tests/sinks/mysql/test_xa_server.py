"""What MariaDB's XA does, checked against the real server the MySQL sink will be tested on.

Each test pins one claim of the design notes (shared/design/mysql-xa-notes.md) that the sink
will rely on; docs/mysql.md has the table of what holds on MariaDB 10.11 and what does not.
A test that fails here means the sink's protocol rests on something the server does not do.
"""

from __future__ import annotations

import secrets
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import pymysql
import pytest
from pymysql.constants import ER

from tests.support.mariadb import (
    DEFAULT_SETTINGS,
    MariaDbDatabase,
    MariaDbServer,
    Xid,
    connection_id,
    recovered,
    wait_disconnected,
)

if TYPE_CHECKING:
    from tests.support.mariadb import Connection

EO_FORMAT_ID = 0x656F  # "eo": any fixed number tells eo's branches from other software's


def new_xid(tag: str, bqual: bytes = b"sink:0:0:1") -> Xid:
    """An xid no other test uses: XA RECOVER lists the whole server's branches."""
    return Xid(f"eo1:{tag}:{secrets.token_hex(6)}".encode(), bqual, EO_FORMAT_ID)


def run(conn: Connection, *statements: str) -> list[tuple[object, ...]]:
    """Run statements in order; the last one's rows."""
    rows: list[tuple[object, ...]] = []
    with conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)
            rows = list(cur.fetchall())
    return rows


def error_code(conn: Connection, statement: str) -> int:
    """The server's error code for a statement that must fail."""
    with pytest.raises(pymysql.MySQLError) as raised:
        run(conn, statement)
    code = raised.value.args[0]
    assert isinstance(code, int)
    return code


def prepare(db: MariaDbDatabase, xid: Xid, *writes: str) -> Connection:
    """A new connection that runs ``writes`` in branch ``xid`` and prepares it; still open."""
    conn = db.connect()
    run(conn, f"XA START {xid.sql()}", *writes, f"XA END {xid.sql()}", f"XA PREPARE {xid.sql()}")
    return conn


def disconnect(server: MariaDbServer, conn: Connection) -> None:
    """Close a connection and wait until the server has ended it."""
    ended = connection_id(conn)
    conn.close()
    wait_disconnected(server, ended)


def leave_prepared(db: MariaDbDatabase, xid: Xid, *writes: str) -> None:
    """Prepare branch ``xid`` in a connection that then ends, as a writer task does."""
    disconnect(db.server, prepare(db, xid, *writes))


@pytest.fixture
def table(mariadb_db: MariaDbDatabase) -> str:
    """An InnoDB table ``t`` in the test's database."""
    with mariadb_db.connect() as conn:
        run(conn, "CREATE TABLE t (id INT PRIMARY KEY, v INT) ENGINE=InnoDB")
    return "t"


@pytest.fixture
def left(mariadb_db: MariaDbDatabase, table: str) -> Xid:
    """A branch that wrote row (1, 10) into ``t``, prepared by a connection that has ended."""
    xid = new_xid("left")
    leave_prepared(mariadb_db, xid, "INSERT INTO t VALUES (1, 10)")
    return xid


def test_a_branch_named_by_gtrid_bqual_and_format_id_is_recovered_and_committed_from_a_new_session(
    mariadb_server: MariaDbServer, mariadb_db: MariaDbDatabase, table: str
) -> None:
    xid = new_xid("full", bqual=b"\x00binary\xffbqual")
    writer = prepare(mariadb_db, xid, "INSERT INTO t VALUES (1, 10)")
    disconnect(mariadb_server, writer)
    with mariadb_db.connect() as other:
        assert xid in recovered(other)
        assert run(other, "SELECT COUNT(*) FROM t") == [(0,)]
        run(other, f"XA COMMIT {xid.sql()}")
        assert xid not in recovered(other)
        assert run(other, "SELECT id, v FROM t") == [(1, 10)]


def test_xa_rollback_of_a_recovered_branch_discards_its_rows(
    mariadb_db: MariaDbDatabase, left: Xid
) -> None:
    with mariadb_db.connect() as other:
        run(other, f"XA ROLLBACK {left.sql()}")
        assert left not in recovered(other)
        assert run(other, "SELECT COUNT(*) FROM t") == [(0,)]


def test_a_prepared_branch_stays_bound_to_its_connection_until_that_connection_ends(
    mariadb_server: MariaDbServer, mariadb_db: MariaDbDatabase, table: str
) -> None:
    """No detach on prepare in MariaDB 10.11 (MySQL 8.0.29+ detaches by default): another
    session sees the branch in XA RECOVER but XA COMMIT answers XAER_NOTA while the preparing
    connection lives, and that connection can start nothing new."""
    xid = new_xid("bound")
    writer = prepare(mariadb_db, xid, "INSERT INTO t VALUES (1, 10)")
    with mariadb_db.connect() as other:
        assert xid in recovered(other)
        assert error_code(other, f"XA COMMIT {xid.sql()}") == ER.XAER_NOTA
        assert error_code(writer, "INSERT INTO t VALUES (2, 20)") == ER.XAER_RMFAIL
        assert error_code(writer, f"XA START {new_xid('next').sql()}") == ER.XAER_RMFAIL
        disconnect(mariadb_server, writer)
        run(other, f"XA COMMIT {xid.sql()}")
        assert run(other, "SELECT COUNT(*) FROM t") == [(1,)]


def test_killing_the_preparing_connection_frees_its_branch_for_commit(
    mariadb_db: MariaDbDatabase, table: str
) -> None:
    """How a zombie writer's connection can be cut off: KILL CONNECTION leaves its branch
    prepared and committable (or roll-backable) by the session that decides."""
    xid = new_xid("kill")
    writer = prepare(mariadb_db, xid, "INSERT INTO t VALUES (1, 10)")  # kept open: alive
    zombie = connection_id(writer)
    with mariadb_db.connect() as other:
        run(other, f"KILL CONNECTION {zombie}")
        wait_disconnected(mariadb_db.server, zombie)
        assert xid in recovered(other)
        run(other, f"XA COMMIT {xid.sql()}")
        assert run(other, "SELECT id FROM t") == [(1,)]


def test_commit_or_rollback_of_an_unknown_or_already_committed_xid_is_xaer_nota_1397(
    mariadb_db: MariaDbDatabase, table: str
) -> None:
    """The ambiguity the decision log resolves: the same 1397 for never-prepared, committed,
    and rolled back."""
    done = new_xid("done")
    leave_prepared(mariadb_db, done, "INSERT INTO t VALUES (1, 10)")
    with mariadb_db.connect() as conn:
        run(conn, f"XA COMMIT {done.sql()}")
        assert error_code(conn, f"XA COMMIT {done.sql()}") == ER.XAER_NOTA
        assert error_code(conn, f"XA ROLLBACK {done.sql()}") == ER.XAER_NOTA
        never = new_xid("never")
        assert error_code(conn, f"XA COMMIT {never.sql()}") == ER.XAER_NOTA
        assert error_code(conn, f"XA ROLLBACK {never.sql()}") == ER.XAER_NOTA


def test_a_second_session_cannot_start_a_branch_with_a_live_xid_but_may_share_the_gtrid(
    mariadb_db: MariaDbDatabase, table: str
) -> None:
    """Writer tasks of one batch share a gtrid and differ in bqual; a zombie reusing a live
    branch's exact xid is refused with XAER_DUPID."""
    first = new_xid("dup", bqual=b"sink:0:0:1")
    sibling = Xid(first.gtrid, b"sink:1:0:1", first.format_id)
    with mariadb_db.connect() as a, mariadb_db.connect() as b, mariadb_db.connect() as c:
        run(a, f"XA START {first.sql()}", "INSERT INTO t VALUES (1, 10)")
        assert error_code(b, f"XA START {first.sql()}") == ER.XAER_DUPID
        run(c, f"XA START {sibling.sql()}", "INSERT INTO t VALUES (2, 20)")
        for conn, xid in ((a, first), (c, sibling)):
            run(conn, f"XA END {xid.sql()}", f"XA PREPARE {xid.sql()}", f"XA COMMIT {xid.sql()}")
        assert run(b, "SELECT id FROM t ORDER BY id") == [(1,), (2,)]


def test_a_branch_that_wrote_nothing_is_rolled_back_when_another_session_finishes_it(
    mariadb_db: MariaDbDatabase, table: str
) -> None:
    """A read-only branch prepares and is listed, but XA COMMIT from another session answers
    XA_RBROLLBACK (1402): each of eo's branches must write at least its marker row."""
    for finish in ("COMMIT", "ROLLBACK"):
        xid = new_xid(f"empty-{finish}")
        leave_prepared(mariadb_db, xid, "SELECT COUNT(*) FROM t")
        with mariadb_db.connect() as other:
            assert xid in recovered(other)
            assert error_code(other, f"XA {finish} {xid.sql()}") == ER.XA_RBROLLBACK
            assert xid not in recovered(other)


def test_a_failed_statement_does_not_fail_its_branch(
    mariadb_db: MariaDbDatabase, table: str
) -> None:
    """A lock wait timeout undoes the statement only (innodb_rollback_on_timeout is off): the
    branch still prepares and commits its other rows, so the writer must roll back itself."""
    xid = new_xid("partial")
    with mariadb_db.connect() as holder, mariadb_db.connect() as writer:
        run(holder, "INSERT INTO t VALUES (2, 0)", "BEGIN", "UPDATE t SET v = 1 WHERE id = 2")
        run(writer, "SET SESSION innodb_lock_wait_timeout = 1", f"XA START {xid.sql()}")
        run(writer, "INSERT INTO t VALUES (1, 10)")
        assert error_code(writer, "UPDATE t SET v = 20 WHERE id = 2") == ER.LOCK_WAIT_TIMEOUT
        run(writer, f"XA END {xid.sql()}", f"XA PREPARE {xid.sql()}", f"XA COMMIT {xid.sql()}")
        run(holder, "ROLLBACK")
        assert run(holder, "SELECT id, v FROM t ORDER BY id") == [(1, 10), (2, 0)]


def test_load_data_local_infile_writes_inside_a_branch(
    mariadb_db: MariaDbDatabase, table: str, tmp_path: Path
) -> None:
    """The bulk path the bench wants: LOAD DATA LOCAL streams a client file into the branch."""
    rows = tmp_path / "rows.tsv"
    rows.write_text("".join(f"{i}\t{i * 10}\n" for i in range(1, 1001)))
    xid = new_xid("load")
    with mariadb_db.connect(local_infile=True) as writer:
        run(writer, f"XA START {xid.sql()}")
        run(writer, f"LOAD DATA LOCAL INFILE '{rows}' INTO TABLE t")
        run(writer, f"XA END {xid.sql()}", f"XA PREPARE {xid.sql()}")
        with mariadb_db.connect() as other:
            assert run(other, "SELECT COUNT(*) FROM t") == [(0,)]
        run(writer, f"XA COMMIT {xid.sql()}")
        assert run(writer, "SELECT COUNT(*), SUM(v) FROM t") == [(1000, Decimal(5005000))]


def test_join_resume_and_suspend_are_refused_not_ignored(mariadb_db: MariaDbDatabase) -> None:
    """MySQL's manual: recognized and without effect. MariaDB 10.11: XAER_INVAL (1398)."""
    xid = new_xid("join")
    with mariadb_db.connect() as conn:
        assert error_code(conn, f"XA START {xid.sql()} JOIN") == ER.XAER_INVAL
        assert error_code(conn, f"XA START {xid.sql()} RESUME") == ER.XAER_INVAL
        run(conn, f"XA START {xid.sql()}")
        assert error_code(conn, f"XA END {xid.sql()} SUSPEND") == ER.XAER_INVAL
        run(conn, f"XA END {xid.sql()}", f"XA ROLLBACK {xid.sql()}")


def test_a_branch_whose_connection_ends_before_prepare_is_rolled_back(
    mariadb_server: MariaDbServer, mariadb_db: MariaDbDatabase, table: str
) -> None:
    """A writer that dies while its branch is ACTIVE (before XA END) or IDLE (before XA
    PREPARE) leaves nothing behind: no listed branch, no rows, no locks."""
    active, idle = new_xid("active"), new_xid("idle")
    for xid, statements in (
        (active, ["INSERT INTO t VALUES (1, 10)"]),
        (idle, ["INSERT INTO t VALUES (2, 20)", f"XA END {idle.sql()}"]),
    ):
        writer = mariadb_db.connect()
        run(writer, f"XA START {xid.sql()}", *statements)
        disconnect(mariadb_server, writer)
    with mariadb_db.connect() as other:
        assert not {active, idle} & set(recovered(other))
        run(other, "SET SESSION innodb_lock_wait_timeout = 1")
        run(other, "INSERT INTO t VALUES (1, 11), (2, 21)")
        assert error_code(other, f"XA COMMIT {idle.sql()}") == ER.XAER_NOTA


def test_ddl_inside_a_branch_is_refused(mariadb_db: MariaDbDatabase, table: str) -> None:
    """DDL commits implicitly, which a branch forbids: tables the writer needs (markers, dead
    letters) must exist before XA START."""
    xid = new_xid("ddl")
    with mariadb_db.connect() as conn:
        run(conn, f"XA START {xid.sql()}")
        assert error_code(conn, "CREATE TABLE markers (id INT) ENGINE=InnoDB") == ER.XAER_RMFAIL
        run(conn, f"XA END {xid.sql()}", f"XA ROLLBACK {xid.sql()}")
        assert run(conn, "SHOW TABLES") == [("t",)]


def test_gtrid_and_bqual_hold_64_bytes_each_and_65_is_a_syntax_error(
    mariadb_db: MariaDbDatabase, table: str
) -> None:
    longest = Xid(b"g" * 64, b"b" * 64, EO_FORMAT_ID)
    with mariadb_db.connect() as conn:
        run(conn, f"XA START {longest.sql()}", f"XA END {longest.sql()}")
        run(conn, f"XA ROLLBACK {longest.sql()}")
        # The parser refuses it (1064), not XA (XAER_INVAL 1398): the sink must hash long ids.
        assert error_code(conn, f"XA START {Xid(b'g' * 65).sql()}") == ER.PARSE_ERROR
        assert error_code(conn, f"XA START {Xid(b'g', b'b' * 65).sql()}") == ER.PARSE_ERROR


def test_xa_recover_format_sql_prints_each_xid_ready_to_paste_and_convert_xid_is_mysql_only(
    mariadb_db: MariaDbDatabase, table: str
) -> None:
    xid = new_xid("format")
    leave_prepared(mariadb_db, xid, "INSERT INTO t VALUES (1, 10)")
    with mariadb_db.connect() as conn:
        rows = run(conn, "XA RECOVER FORMAT='SQL'")
        expected = xid.sql().lower()
        mine = [str(row[3]) for row in rows if str(row[3]).lower() == expected]
        assert len(mine) == 1, rows
        run(conn, f"XA COMMIT {mine[0]}")
        assert xid not in recovered(conn)
        assert error_code(conn, "XA RECOVER CONVERT XID") == ER.PARSE_ERROR


def test_xa_commit_one_phase_commits_an_idle_branch_without_prepare(
    mariadb_db: MariaDbDatabase, table: str
) -> None:
    xid = new_xid("one-phase")
    with mariadb_db.connect() as conn:
        run(conn, f"XA START {xid.sql()}", "INSERT INTO t VALUES (1, 10)", f"XA END {xid.sql()}")
        run(conn, f"XA COMMIT {xid.sql()} ONE PHASE")
        assert run(conn, "SELECT COUNT(*) FROM t") == [(1,)]


def test_a_myisam_table_in_a_branch_is_written_at_once_and_kept_by_rollback(
    mariadb_server: MariaDbServer, mariadb_db: MariaDbDatabase
) -> None:
    """Why the sink refuses MyISAM: its rows are visible before the decision and survive
    XA ROLLBACK, so a retried batch lands twice. The recovering session gets no warning (the
    writing session would get 1196): nothing at rollback time tells."""
    xid = new_xid("myisam")
    with mariadb_db.connect() as conn:
        run(conn, "CREATE TABLE m (id INT PRIMARY KEY) ENGINE=MyISAM")
        run(conn, "CREATE TABLE i (id INT PRIMARY KEY) ENGINE=InnoDB")
    writer = prepare(mariadb_db, xid, "INSERT INTO m VALUES (1)", "INSERT INTO i VALUES (1)")
    with mariadb_db.connect() as other:
        assert run(other, "SELECT COUNT(*) FROM m") == [(1,)]  # before any decision
        assert run(other, "SELECT COUNT(*) FROM i") == [(0,)]
        disconnect(mariadb_server, writer)
        assert run(other, f"XA ROLLBACK {xid.sql()}", "SHOW WARNINGS") == []
        assert run(other, "SELECT COUNT(*) FROM m") == [(1,)]
        assert run(other, "SELECT COUNT(*) FROM i") == [(0,)]


def test_a_prepared_branch_holds_its_row_locks_and_the_tables_metadata_lock(
    mariadb_db: MariaDbDatabase, left: Xid
) -> None:
    """Its rows stay invisible and locked until the decision; DDL on the table waits."""
    xid = left
    with mariadb_db.connect() as other:
        run(other, "SET SESSION innodb_lock_wait_timeout = 1", "SET SESSION lock_wait_timeout = 1")
        assert run(other, "SELECT COUNT(*) FROM t") == [(0,)]
        assert error_code(other, "INSERT INTO t VALUES (1, 11)") == ER.LOCK_WAIT_TIMEOUT
        assert error_code(other, "ALTER TABLE t ADD COLUMN w INT") == ER.LOCK_WAIT_TIMEOUT
        run(other, f"XA COMMIT {xid.sql()}")
        run(other, "ALTER TABLE t ADD COLUMN w INT")


def test_any_user_may_list_and_commit_any_prepared_branch_on_mariadb(
    mariadb_server: MariaDbServer, mariadb_db: MariaDbDatabase, table: str
) -> None:
    """MariaDB 10.11 has no XA_RECOVER_ADMIN (MySQL 8.0): a user with no privilege at all sees
    every prepared xid and can finish another user's branch, on tables it cannot read."""
    user = f"u{secrets.token_hex(4)}"
    with mariadb_server.connect() as root:
        run(root, f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw'")
    try:
        xid = new_xid("privilege")
        leave_prepared(mariadb_db, xid, "INSERT INTO t VALUES (1, 10)")
        with mariadb_server.connect(user=user, password="pw") as nobody:
            grants = [str(row[0]) for row in run(nobody, "SHOW GRANTS")]
            assert len(grants) == 1 and grants[0].startswith("GRANT USAGE ON *.*"), grants
            assert xid in recovered(nobody)
            denied = error_code(nobody, f"SELECT * FROM {mariadb_db.name}.t")
            assert denied == ER.TABLEACCESS_DENIED_ERROR
            run(nobody, f"XA COMMIT {xid.sql()}")
        with mariadb_db.connect() as conn:
            assert run(conn, "SELECT id FROM t") == [(1,)]
        with mariadb_server.connect() as root:
            grant = error_code(root, f"GRANT XA_RECOVER_ADMIN ON *.* TO '{user}'@'%'")
            assert grant == ER.PARSE_ERROR  # MySQL 8's statement, unknown here
    finally:
        with mariadb_server.connect() as root:
            run(root, f"DROP USER '{user}'@'%'")


def test_the_settings_the_sink_contract_reads(mariadb_db: MariaDbDatabase, table: str) -> None:
    with mariadb_db.connect() as conn:
        run(conn, "CREATE TABLE m (id INT) ENGINE=MyISAM")
        engines = run(
            conn,
            "SELECT TABLE_NAME, ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = "
            f"'{mariadb_db.name}' ORDER BY TABLE_NAME",
        )
        assert engines == [("m", "MyISAM"), ("t", "InnoDB")]
        version, log_bin, binlog_format = run(conn, "SELECT @@version, @@log_bin, @@binlog_format")[
            0
        ]
        assert "MariaDB" in str(version) and str(version).startswith("10.11.")
        assert (log_bin, binlog_format) == (1, "ROW")
        for gone in ("innodb_support_xa", "xa_detach_on_prepare"):
            assert error_code(conn, f"SELECT @@{gone}") == ER.UNKNOWN_SYSTEM_VARIABLE
        assert run(
            conn,
            "SELECT SUPPORT, XA FROM information_schema.ENGINES WHERE ENGINE IN "
            "('InnoDB', 'MyISAM') ORDER BY ENGINE",
        ) == [("DEFAULT", "YES"), ("YES", "NO")]


def test_with_the_binary_log_on_prepare_and_commit_are_logged_apart(
    mariadb_db: MariaDbDatabase, table: str
) -> None:
    """MariaDB 10.5+ (MDEV-742) writes XA PREPARE to the binary log as its own event group and
    the later XA COMMIT as another: what lets a prepared branch survive a restart with the
    binary log as transaction coordinator."""
    xid = new_xid("binlog")
    with mariadb_db.connect() as conn:
        log_file = run(conn, "SHOW MASTER STATUS")[0][0]
    leave_prepared(mariadb_db, xid, "INSERT INTO t VALUES (1, 10)")
    with mariadb_db.connect() as conn:
        run(conn, f"XA COMMIT {xid.sql()}")
        events = [str(row[5]) for row in run(conn, f"SHOW BINLOG EVENTS IN '{log_file}'")]
    mine = [e for e in events if xid.gtrid.hex() in e.lower()]
    assert [e.split()[:2] for e in mine] == [
        ["XA", "START"],
        ["XA", "END"],
        ["XA", "PREPARE"],
        ["XA", "COMMIT"],
    ], mine


def test_prepared_branches_survive_a_clean_restart_and_a_crash_with_the_binary_log_on_and_off(
    mariadb_server: MariaDbServer, mariadb_db: MariaDbDatabase, table: str
) -> None:
    """MDEV-742 (10.5+): prepared branches are persistent whichever coordinator (binary log
    or tc.log) the server uses. Restarts the worker's shared server four times."""
    without_binlog = {k: v for k, v in DEFAULT_SETTINGS.items() if k not in {"log-bin"}}
    try:
        for settings, log_bin in ((DEFAULT_SETTINGS, 1), (without_binlog, 0)):
            mariadb_server.restart(settings=settings)
            clean, crashed = new_xid(f"clean{log_bin}"), new_xid(f"crash{log_bin}")
            base = 10 * log_bin
            leave_prepared(mariadb_db, clean, f"INSERT INTO t VALUES ({base + 1}, 1)")
            leave_prepared(mariadb_db, empty := new_xid(f"empty{log_bin}"), "SELECT 1")
            mariadb_server.restart()
            leave_prepared(mariadb_db, crashed, f"INSERT INTO t VALUES ({base + 2}, 2)")
            mariadb_server.restart(crash=True)
            with mariadb_db.connect() as conn:
                assert run(conn, "SELECT @@log_bin") == [(log_bin,)]
                assert {clean, crashed} <= set(recovered(conn))
                assert empty not in recovered(conn)  # wrote nothing: not durable
                run(conn, f"XA COMMIT {clean.sql()}", f"XA ROLLBACK {crashed.sql()}")
                rows = run(conn, f"SELECT id FROM t WHERE id BETWEEN {base + 1} AND {base + 2}")
                assert rows == [(base + 1,)]
    finally:
        mariadb_server.restart(settings=DEFAULT_SETTINGS)
