"""Does this MySQL/MariaDB sink honour the exactly-once contract? Say why not, precisely.

The MySQL counterpart of ``sinks/postgres/contract.py`` (same ``ContractProblem``): a driver
checks all of this before its first batch and refuses to start in exactly-once mode, with every
problem listed, each naming the statement (or setting) that fixes it.

What silently breaks a MySQL/MariaDB sink:

* a table whose engine ignores transactions (MyISAM, MEMORY, Aria, CSV...): its rows are
  written at once, so a rolled-back or aborted batch stays and its replay writes it again;
* a missing table or columns, missing privileges (found only mid-batch otherwise);
* for upserts, no unique key on exactly the key columns, **or another unique key**:
  ``ON DUPLICATE KEY UPDATE`` fires on a collision with any unique key, so a collision on the
  other one updates a row the key columns never named;
* an ``auditColumn`` too narrow for batch ids;
* for two-phase commit: a server whose prepared XA branches do not survive a disconnect or
  restart (MariaDB < 10.5.2, MySQL < 5.7.7), XA switched off (``innodb_support_xa``), redo or
  binary log settings that let an OS crash lose a prepare or a commit eo was told about, a
  statement-format binary log, and a role that cannot list prepared branches (``XA RECOVER``).

Privileges are checked by asking the server, not by parsing ``SHOW GRANTS``: ``EXPLAIN`` of an
``INSERT``/``UPDATE``/``DELETE``/``SELECT`` runs the server's own privilege check (roles,
database wildcards, column grants included) and executes nothing, and ``PREPARE`` of a
``CREATE TABLE`` checks ``CREATE`` without creating (both verified on MariaDB 10.11 in
``tests/sinks/mysql/test_contract.py``). ``information_schema`` lists only the tables and
columns a user holds some privilege on, so one it does not list is told apart (missing, or
hidden from this user) by the same probes. docs/mysql.md lists every check and its fix.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import pymysql
import pymysql.cursors
from pymysql.constants import ER

from eo_jobs.protocol.mysql_xa import MARKERS_TABLE
from eo_jobs.sinks.mysql.writer import quote_identifier
from eo_jobs.sinks.postgres.contract import ContractProblem

Connection: TypeAlias = "pymysql.Connection[pymysql.cursors.Cursor]"

MARIADB_MIN_VERSION = (10, 5, 2)
"""MDEV-742 (MariaDB 10.5.2): a prepared XA branch survives its connection's end and a server
restart. Before it, MariaDB rolled a prepared branch back when its connection closed, so a
writer that prepared and disconnected (as eo's must, docs/mysql.md) lost its rows."""
MYSQL_MIN_VERSION = (5, 7, 7)
"""WL#6860 (MySQL 5.7.7): "a prepared XA-transaction will survive both a client reconnects or
the server restarts". The 5.7 manual: before 5.7.7 a PREPARED branch "would be rolled back on
clean server shutdown or client disconnect"."""
DURABLE_FLUSH = ("1", "3")
"""``innodb_flush_log_at_trx_commit`` values that flush the redo log at each prepare/commit.
MariaDB's manual: "1 and 3 guarantees that after a crash, committed transactions will not be
lost [...]. 2 can get inconsistent and lose transactions if there is a power failure or kernel
crash but not if mysqld crashes. 0 has no guarantees in case of crash." (3 is MariaDB only.)"""
AUDIT_INTEGER_DIGITS = 19
"""A batch id is a non-negative 64-bit integer: up to 9,223,372,036,854,775,807, 19 digits.
BIGINT holds it; DECIMAL holds it with at least 19 digits before the point; INT stops at
2,147,483,647 and text compares as text (the audit counts rows above its position)."""
SETTINGS = (
    "version",
    "log_bin",
    "sync_binlog",
    "binlog_format",
    "innodb_flush_log_at_trx_commit",
    "innodb_support_xa",
)
"""The global variables the two-phase checks read (one ``SHOW GLOBAL VARIABLES``: a variable
a server does not have is simply absent, where ``SELECT @@name`` would fail with 1193)."""
MARKER_PRIVILEGES = {
    "INSERT": "each branch inserts its marker row",
    "SELECT": "recovery reads marker rows",
    "DELETE": "pruning deletes old marker rows",
    "UPDATE": "pruning raises its horizon row with INSERT ... ON DUPLICATE KEY UPDATE",
}
"""What eo does with its marker table (``protocol/mysql_xa.py``), hence what it needs."""
ACCEPTED_TABLE_TYPES = ("BASE TABLE", "SYSTEM VERSIONED")
ACCESS_DENIED = (
    ER.TABLEACCESS_DENIED_ERROR,
    ER.COLUMNACCESS_DENIED_ERROR,
    ER.DBACCESS_DENIED_ERROR,
)
CLIENT_ERRORS = 2000
"""MySQL error numbers from 2000 up are the client's (lost connection and the like)."""

_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True)
class Server:
    """What ``SHOW GLOBAL VARIABLES`` says about the server."""

    mariadb: bool
    version: tuple[int, int, int] | None
    text: str
    settings: dict[str, str]

    @property
    def product(self) -> str:
        """``MariaDB`` or ``MySQL``."""
        return "MariaDB" if self.mariadb else "MySQL"


@dataclass(frozen=True)
class Column:
    """One column of the sink table, from ``information_schema.COLUMNS``."""

    name: str
    data_type: str
    column_type: str
    integer_digits: int | None
    nullable: bool
    auto_increment: bool


HIDDEN = Column("", "", "", None, nullable=True, auto_increment=False)
"""A column information_schema does not show this user, which may exist."""


def check_contract(
    conn: Connection,
    table: str,
    *,
    columns: Sequence[str] = (),
    mode: str = "append",
    key_columns: Sequence[str] = (),
    two_phase: bool = True,
    version_column: str | None = None,
    audit_column: str | None = None,
) -> list[ContractProblem]:
    """Every contract problem of ``table`` (``database.table``, or ``table`` in the
    connection's database) for this writer; empty when all is well."""
    problems: list[ContractProblem] = []
    current = _one(conn, "SELECT DATABASE()")
    database, _, name = table.partition(".") if "." in table else (current, "", table)
    user = _current_user(conn)
    if not database:
        return [
            ContractProblem(
                "no-database",
                f"table {table} names no database and the connection has none selected; "
                "write it as database.table or put the database in the DSN "
                "(mysql://user@host:port/DATABASE)",
            )
        ]
    database = str(database)
    target = f"{quote_identifier(database)}.{quote_identifier(name)}"
    if two_phase:
        problems.extend(_two_phase(conn, read_server(conn), user))
    found = _table(conn, database, name)
    if found is None:
        problems.append(_missing_table(conn, database, target, user))
        return problems
    table_type, engine = found
    if table_type not in ACCEPTED_TABLE_TYPES:
        problems.append(
            ContractProblem(
                "not-a-table",
                f"{target} is a {table_type.lower()}, not a table; point the sink at the "
                "base table it reads from",
            )
        )
        return problems
    problems.extend(_engine(conn, target, engine, two_phase))
    existing = _columns(conn, database, name)
    written = [c for c in columns if c.lower() != (audit_column or "").lower()]
    named = [*written, *(c for c in (audit_column, version_column) if c is not None)]
    hidden = [c for c in named if c.lower() not in existing and _hidden(conn, target, c)]
    if hidden:
        listed = ", ".join(quote_identifier(c) for c in hidden)
        problems.append(
            ContractProblem(
                "privilege",
                f"user {user} cannot see column(s) {', '.join(hidden)} of {target}: with "
                "privileges on some columns only, information_schema and the server hide "
                "the others (whether they exist or not); "
                f"GRANT INSERT ({listed}) ON {target} TO {user}",
            )
        )
    existing.update({c.lower(): HIDDEN for c in hidden})  # reported above, not as missing
    missing = [c for c in written if c.lower() not in existing]
    if missing:
        adds = ", ".join(f"ADD COLUMN {quote_identifier(c)} <type>" for c in missing)
        problems.append(
            ContractProblem(
                "missing-columns",
                f"table {target} has no column(s) {', '.join(missing)} that the pipeline "
                f"writes; run ALTER TABLE {target} {adds}, or change the transform",
            )
        )
    inserted = [c for c in written if existing.get(c.lower(), HIDDEN) is not HIDDEN]
    if existing.get((audit_column or "").lower(), HIDDEN) is not HIDDEN:
        inserted.append(str(audit_column))
    problems.extend(_table_privileges(conn, target, user, mode, inserted, key_columns, existing))
    if current:
        problems.extend(_marker_privileges(conn, str(current), user))
    if mode != "append":
        problems.extend(_keys(conn, database, name, target, mode, key_columns, columns, existing))
    if version_column is not None and version_column.lower() not in existing:
        problems.append(
            ContractProblem(
                "version-column",
                f"table {target} has no column {version_column} for versionColumn (an "
                "upsert keeps the row with the highest version); run ALTER TABLE "
                f"{target} ADD COLUMN {quote_identifier(version_column)} <type>",
            )
        )
    problems.extend(_audit_column(target, audit_column, existing))
    return problems


# -- the server ------------------------------------------------------------------------------


def read_server(conn: Connection) -> Server:
    """The sink's server, from its global variables."""
    marks = ", ".join(["%s"] * len(SETTINGS))
    rows = _rows(conn, f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({marks})", SETTINGS)
    return server_of({str(k): str(v) for k, v in rows})


def server_of(variables: dict[str, str]) -> Server:
    """The server as its global variables (``SHOW GLOBAL VARIABLES``) describe it."""
    settings = {k.lower(): v for k, v in variables.items()}
    text = settings.get("version", "")
    match = _VERSION.match(text)
    version = None if match is None else (int(match[1]), int(match[2]), int(match[3]))
    return Server("mariadb" in text.lower(), version, text, settings)


def _two_phase(conn: Connection, server: Server, user: str) -> list[ContractProblem]:
    """What a prepared branch needs to outlive a disconnect, a restart and an OS crash, and
    the role's right to list prepared branches."""
    return [*server_problems(server), *_xa_recover(conn, server, user)]


def server_problems(server: Server) -> list[ContractProblem]:
    """The server's version and its server-wide XA, redo log and binary log settings."""
    problems: list[ContractProblem] = []
    minimum = MARIADB_MIN_VERSION if server.mariadb else MYSQL_MIN_VERSION
    if server.version is None or server.version < minimum:
        why = (
            "MariaDB rolls a prepared XA branch back when its connection ends before 10.5.2 "
            "(MDEV-742)"
            if server.mariadb
            else "MySQL rolls a prepared XA branch back at client disconnect and clean "
            "shutdown before 5.7.7 (WL#6860)"
        )
        problems.append(
            ContractProblem(
                "server-version",
                f"the sink server is {server.product} {server.text or '(version unknown)'}: "
                f"{why}, and eo's writers disconnect right after XA PREPARE, so every "
                f"prepared batch would be lost; upgrade to {server.product} "
                f"{'.'.join(map(str, minimum))} or later",
            )
        )
    support = server.settings.get("innodb_support_xa")
    if support is not None and support.upper() in ("OFF", "0"):
        # Only old servers have it (removed in MariaDB 10.3 and MySQL 8.0, where XA is always
        # on; docs/mysql.md: unknown on 10.11). OFF means InnoDB ignores XA PREPARE.
        problems.append(
            ContractProblem(
                "innodb_support_xa",
                "innodb_support_xa is OFF: InnoDB does not do two-phase commit, so XA "
                "PREPARE guarantees nothing; run SET GLOBAL innodb_support_xa = ON and put "
                "innodb_support_xa = ON under [mysqld] in my.cnf",
            )
        )
    flush = server.settings.get("innodb_flush_log_at_trx_commit")
    if flush is not None and flush not in DURABLE_FLUSH:
        crash = (
            "any crash, even of the server alone,"
            if flush == "0"
            else "an OS crash or a power loss"
        )
        problems.append(
            ContractProblem(
                "innodb_flush_log_at_trx_commit",
                f"innodb_flush_log_at_trx_commit is {flush}: InnoDB flushes its redo log "
                "about once a second instead of at each XA PREPARE and commit, so "
                f"{crash} can lose a branch that the server reported prepared, after eo "
                "decided to commit it "
                "(a lost batch); run SET GLOBAL innodb_flush_log_at_trx_commit = 1 and put "
                "innodb_flush_log_at_trx_commit = 1 under [mysqld] in my.cnf",
            )
        )
    if server.settings.get("log_bin", "OFF").upper() in ("ON", "1"):
        problems.extend(_binary_log(server))
    return problems


def _binary_log(server: Server) -> list[ContractProblem]:
    """Binary log settings that matter for XA (the log is on)."""
    problems: list[ContractProblem] = []
    sync = server.settings.get("sync_binlog")
    if sync is not None and sync != "1":
        # With the binary log on, it is the server's transaction coordinator: MariaDB's
        # "Binlog group commit and innodb_flush_log_at_trx_commit" page says that with
        # --log-bin and sync-binlog=0 "commits are not guaranteed durable inside InnoDB after
        # commit", because InnoDB leaves their durability to the binary log and "events can be
        # lost from the binlog" in a crash; MySQL's manual says only sync_binlog=1 keeps a
        # power failure or OS crash from leaving transactions in InnoDB that the binary log
        # lacks. XA PREPARE and XA COMMIT are binary-logged event groups of their own
        # (MDEV-742, WL#6860), so either can be lost or disagree with InnoDB.
        problems.append(
            ContractProblem(
                "sync_binlog",
                f"sync_binlog is {sync} with the binary log on: the server does not fsync "
                "the binary log at each XA PREPARE and XA COMMIT, and it is the log the "
                "server's crash recovery and its replicas go by, so a power loss or OS "
                "crash can lose a prepare or a commit eo was already told about, or leave "
                "the replicas with a batch the server lost; run SET GLOBAL sync_binlog = 1 "
                "and put sync_binlog = 1 under [mysqld] in my.cnf",
            )
        )
    if server.settings.get("binlog_format", "").upper() == "STATEMENT":
        # MySQL manual, "Restrictions on XA Transactions": XA transactions are unsafe for
        # statement-based replication (two XA transactions prepared in the inverse order on
        # a replica can deadlock it); with MIXED or ROW, DML inside XA is logged as rows.
        problems.append(
            ContractProblem(
                "binlog_format",
                "binlog_format is STATEMENT with the binary log on: XA transactions are "
                "unsafe for statement-based replication (a replica that prepares two of "
                "them in the inverse order can deadlock and stop); run SET GLOBAL "
                "binlog_format = 'ROW' and put binlog_format = ROW under [mysqld] in my.cnf",
            )
        )
    return problems


def _xa_recover(conn: Connection, server: Server, user: str) -> list[ContractProblem]:
    """Can this role list prepared branches? Asked by running ``XA RECOVER``: MySQL 8 wants
    XA_RECOVER_ADMIN for it (and fails with XAER_RMERR without), MariaDB lets anyone
    (docs/mysql.md); probing covers both and any server in between."""
    try:
        _rows(conn, "XA RECOVER")
    except pymysql.MySQLError as exc:
        fix = (
            f"GRANT XA_RECOVER_ADMIN ON *.* TO {user}"
            if not server.mariadb
            else "have an administrator check the role's privileges on this server"
        )
        return [
            ContractProblem(
                "xa-recover",
                f"user {user} cannot run XA RECOVER ({exc.args[-1]}): recovery could not "
                f"find the batches left prepared by a crash; {fix}",
            )
        ]
    return []


# -- the table -------------------------------------------------------------------------------


def _table(conn: Connection, database: str, name: str) -> tuple[str, str] | None:
    rows = _rows(
        conn,
        "SELECT TABLE_TYPE, ENGINE FROM information_schema.TABLES "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
        (database, name),
    )
    return None if not rows else (str(rows[0][0]), str(rows[0][1] or ""))


def _missing_table(conn: Connection, database: str, target: str, user: str) -> ContractProblem:
    """``information_schema`` does not list it: missing, or hidden from a user without any
    privilege on it. An INSERT probe tells which (1146: missing; 1142: denied, and MySQL does
    not say whether the table exists)."""
    denied = _denied(conn, f"EXPLAIN INSERT INTO {target} () VALUES ()")  # noqa: S608
    if denied is not None and denied[0] != ER.NO_SUCH_TABLE:
        return ContractProblem(
            "missing-table",
            f"table {target} is not visible to user {user}: it does not exist, or the user "
            "holds no privilege on it (information_schema lists only such tables); create "
            f"it (ENGINE=InnoDB), or GRANT INSERT ON {target} TO {user}",
        )
    return ContractProblem(
        "missing-table",
        f"table {target} does not exist in database {database}; create it (ENGINE=InnoDB) "
        "before starting the pipeline (eo never creates data tables)",
    )


def _engine(conn: Connection, target: str, engine: str, two_phase: bool) -> list[ContractProblem]:
    """The table's engine must take part in transactions (and in XA, for two-phase commit):
    ``information_schema.ENGINES`` says which do; in practice only InnoDB does both."""
    rows = _rows(
        conn, "SELECT TRANSACTIONS, XA FROM information_schema.ENGINES WHERE ENGINE = %s", (engine,)
    )
    transactions, xa = (str(rows[0][0]), str(rows[0][1])) if rows else ("NO", "NO")
    if transactions == "YES" and (xa == "YES" or not two_phase):
        return []
    lacks = "transactions" if transactions != "YES" else "XA (two-phase commit)"
    return [
        ContractProblem(
            "engine",
            f"table {target} uses the {engine or 'unknown'} engine, which ignores {lacks}: "
            "each row is written at once, so the rows of a batch that is rolled back, or "
            "prepared and then aborted, stay in the table, and the batch's replay writes "
            "them again (a totals table such as merchant_daily_volume counts them twice; on "
            "MariaDB a MyISAM row written inside an XA branch is visible at once and kept by "
            f"XA ROLLBACK, docs/mysql.md); run ALTER TABLE {target} ENGINE=InnoDB",
        )
    ]


def _columns(conn: Connection, database: str, name: str) -> dict[str, Column]:
    """The table's columns by lower-cased name (MySQL column names ignore case)."""
    rows = _rows(
        conn,
        "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION - NUMERIC_SCALE, "
        "IS_NULLABLE, EXTRA FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
        (database, name),
    )
    return {
        str(r[0]).lower(): Column(
            name=str(r[0]),
            data_type=str(r[1]).lower(),
            column_type=str(r[2]),
            integer_digits=None if r[3] is None else int(r[3]),
            nullable=str(r[4]) == "YES",
            auto_increment="auto_increment" in str(r[5]).lower(),
        )
        for r in rows
    }


# -- privileges ------------------------------------------------------------------------------


def _table_privileges(
    conn: Connection,
    target: str,
    user: str,
    mode: str,
    inserted: Sequence[str],
    key_columns: Sequence[str],
    existing: dict[str, Column],
) -> list[ContractProblem]:
    """INSERT on the columns eo writes; UPDATE on the non-key ones for an upsert. (Every
    identifier in a probe is quoted by ``quote_identifier``; probes execute nothing.)"""
    problems: list[ContractProblem] = []
    names = ", ".join(quote_identifier(c) for c in inserted)
    nulls = ", ".join("NULL" for _ in inserted)
    insert = _denied(conn, f"EXPLAIN INSERT INTO {target} ({names}) VALUES ({nulls})")  # noqa: S608
    if insert is not None:
        why = "eo's writers insert each batch's rows"
        problems.append(_privilege_problem("INSERT", target, user, insert, why))
    if mode != "append":
        keys = {k.lower() for k in key_columns}
        updated = [c for c in inserted if c.lower() not in keys] or list(inserted)
        if not updated:  # no columns named: any one column probes the table-wide grant
            updated = [c.name for c in existing.values() if c is not HIDDEN][:1]
        sets = ", ".join(f"{quote_identifier(c)} = NULL" for c in updated)
        update = _denied(conn, f"EXPLAIN UPDATE {target} SET {sets} WHERE FALSE")  # noqa: S608
        if update is not None:
            why = f"{mode} updates existing rows through ON DUPLICATE KEY UPDATE"
            problems.append(_privilege_problem("UPDATE", target, user, update, why))
    return problems


def _marker_privileges(conn: Connection, database: str, user: str) -> list[ContractProblem]:
    """eo's marker table lives in the connection's database; eo creates it when missing
    (``MySqlPreparedTransactions.ensure_schema``), which takes CREATE there."""
    markers = f"{quote_identifier(database)}.{quote_identifier(MARKERS_TABLE)}"
    probes = {
        "INSERT": f"EXPLAIN INSERT INTO {markers} () VALUES ()",  # noqa: S608
        "SELECT": f"EXPLAIN SELECT 1 FROM {markers}",  # noqa: S608
        "DELETE": f"EXPLAIN DELETE FROM {markers} WHERE FALSE",  # noqa: S608
        "UPDATE": f"EXPLAIN UPDATE {markers} SET batch_id = 0 WHERE FALSE",  # noqa: S608
    }
    lacking: list[str] = []
    missing = False
    for privilege, probe in probes.items():
        denied = _denied(conn, probe)
        if denied is not None and denied[0] in ACCESS_DENIED:
            lacking.append(privilege)
        elif denied is not None and denied[0] == ER.NO_SUCH_TABLE:
            missing = True  # the privilege check passed (it comes first); the table is absent
    # A user denied everything on it is not told whether it exists (information_schema
    # hides it too): then it may be missing, and creating it is checked as well.
    unknown = len(lacking) == len(probes)
    problems: list[ContractProblem] = []
    if lacking:
        uses = "; ".join(f"{p}: {MARKER_PRIVILEGES[p]}" for p in lacking)
        problems.append(
            ContractProblem(
                "privilege",
                f"user {user} lacks {', '.join(lacking)} on eo's marker table {markers} "
                f"({uses}); GRANT {', '.join(lacking)} ON {markers} TO {user}",
            )
        )
    if missing or unknown:
        statement = conn.escape(f"CREATE TABLE {markers} (x INT)")
        create = _denied(conn, f"PREPARE eo_contract_probe FROM {statement}")
        if create is None:
            _rows(conn, "DEALLOCATE PREPARE eo_contract_probe")
        else:
            state = "does not exist yet" if missing else "is hidden from this user or missing"
            problems.append(
                ContractProblem(
                    "privilege",
                    f"eo's marker table {markers} {state}, and user {user} cannot create it "
                    "(eo creates it before the first batch); GRANT CREATE ON "
                    f"{quote_identifier(database)}.* TO {user}, or have an administrator "
                    "run `eo recover` once",
                )
            )
    return problems


def _privilege_problem(
    privilege: str, target: str, user: str, error: tuple[int, str], why: str
) -> ContractProblem:
    code, text = error
    if code not in ACCESS_DENIED:
        return ContractProblem(
            "probe",
            f"could not check {privilege} on {target} for user {user}: EXPLAIN of a "
            f"{privilege} failed with {code} ({text}); fix that error and check again",
        )
    return ContractProblem(
        "privilege",
        f"user {user} lacks {privilege} on {target} ({why}; the server says: {text}); "
        f"GRANT {privilege} ON {target} TO {user}",
    )


# -- keys and typed columns ------------------------------------------------------------------


def _keys(
    conn: Connection,
    database: str,
    name: str,
    target: str,
    mode: str,
    key_columns: Sequence[str],
    columns: Sequence[str],
    existing: dict[str, Column],
) -> list[ContractProblem]:
    """An upsert (``INSERT ... ON DUPLICATE KEY UPDATE``) needs a unique key on exactly the
    key columns, and no other unique key that a written row could collide with: the statement
    updates the row it collides with on *any* unique key (PostgreSQL's ON CONFLICT names its
    key; MySQL's does not). MariaDB's "Unsafe Statements for Statement-based Replication" page
    lists ``INSERT ... ON DUPLICATE KEY UPDATE`` on tables with several primary or unique keys
    for the same reason: which row it updates depends on which key collides."""
    problems: list[ContractProblem] = []
    keys = ", ".join(quote_identifier(k) for k in key_columns)
    if not key_columns:
        return [
            ContractProblem(
                "no-unique-key",
                f"{mode} into {target} needs keyColumns (the columns of its unique key); "
                "name them in the sink spec",
            )
        ]
    indexes: dict[str, list[tuple[str, int | None]]] = {}
    for index, column, prefix in _rows(
        conn,
        "SELECT INDEX_NAME, COLUMN_NAME, SUB_PART FROM information_schema.STATISTICS "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0 "
        "ORDER BY INDEX_NAME, SEQ_IN_INDEX",
        (database, name),
    ):
        indexes.setdefault(str(index), []).append(
            (str(column), None if prefix is None else int(prefix))
        )
    wanted = {k.lower() for k in key_columns}
    exact = [
        index
        for index, parts in indexes.items()
        if {c.lower() for c, _ in parts} == wanted and all(p is None for _, p in parts)
    ]
    if not exact:
        problems.append(
            ContractProblem(
                "no-unique-key",
                f"{mode} needs a PRIMARY KEY or UNIQUE key on exactly ({', '.join(key_columns)}) "
                f"of {target}, on whole columns (a prefix key makes rows that differ after "
                f"the prefix collide); run ALTER TABLE {target} ADD UNIQUE KEY ({keys})",
            )
        )
    written = {c.lower() for c in columns}
    for index, parts in indexes.items():
        if index in exact or all(
            any(c.lower() == k and p is None for c, p in parts) for k in wanted
        ):
            continue  # a collision on a key holding the whole key columns is the same row
        if any(
            existing.get(c.lower()) is not None
            and existing[c.lower()].auto_increment
            and c.lower() not in written
            for c, _ in parts
        ):
            continue  # an AUTO_INCREMENT value eo does not write is new on every insert
        shown = ", ".join(c if p is None else f"{c}({p})" for c, p in parts)
        drop = "DROP PRIMARY KEY" if index == "PRIMARY" else f"DROP INDEX {quote_identifier(index)}"
        problems.append(
            ContractProblem(
                "other-unique-key",
                f"table {target} has the unique key {index} ({shown}) besides the upsert's "
                f"key ({', '.join(key_columns)}): ON DUPLICATE KEY UPDATE fires on a "
                f"collision with any unique key, so a row that collides on {index} would "
                "update that other row (a row with different key columns) instead of being "
                f"inserted; run ALTER TABLE {target} {drop}, or make ({shown}) the keyColumns",
            )
        )
    return problems


def _audit_column(
    target: str, column: str | None, existing: dict[str, Column]
) -> list[ContractProblem]:
    """The ``auditColumn`` eo fills with batch ids: present, and of a type that holds them."""
    if column is None:
        return []
    found = existing.get(column.lower())
    if found is HIDDEN:
        return []  # reported as a privilege problem
    if found is None:
        return [
            ContractProblem(
                "audit-column",
                f"table {target} has no column {column} for auditColumn (eo fills it with "
                f"each row's batch id); run ALTER TABLE {target} ADD COLUMN "
                f"{quote_identifier(column)} BIGINT",
            )
        ]
    if found.data_type == "bigint" or (
        found.data_type == "decimal" and (found.integer_digits or 0) >= AUDIT_INTEGER_DIGITS
    ):
        return []
    not_null = "" if found.nullable else " NOT NULL"
    return [
        ContractProblem(
            "audit-column",
            f"auditColumn {target}.{quote_identifier(found.name)} is {found.column_type}, which "
            "cannot hold every batch id (up to 2^63 - 1) as a number; run ALTER TABLE "
            f"{target} MODIFY {quote_identifier(found.name)} BIGINT{not_null}",
        )
    ]


# -- helpers ---------------------------------------------------------------------------------


def _rows(conn: Connection, statement: str, args: object = None) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(statement, args)
        return list(cur.fetchall())


def _one(conn: Connection, statement: str) -> Any:
    rows = _rows(conn, statement)
    return rows[0][0] if rows else None


def _current_user(conn: Connection) -> str:
    """The account the server matched (``'name'@'host'``), as GRANT takes it."""
    account = str(_one(conn, "SELECT CURRENT_USER()"))
    name, _, host = account.rpartition("@")
    return f"{conn.escape(name)}@{conn.escape(host)}"


def _hidden(conn: Connection, target: str, column: str) -> bool:
    """A column information_schema does not list: hidden rather than missing? Missing when
    an INSERT or a SELECT naming it fails with 1054 (unknown column); a user denied both
    (1142, or 1143, which a user with grants on some columns only gets for any other name,
    existing or not) cannot be told, and the column counts as hidden."""
    quoted = quote_identifier(column)
    for probe in (
        f"EXPLAIN INSERT INTO {target} ({quoted}) VALUES (NULL)",  # noqa: S608
        f"EXPLAIN SELECT {quoted} FROM {target}",  # noqa: S608
    ):
        denied = _denied(conn, probe)
        if denied is None or denied[0] not in ACCESS_DENIED:
            return False
    return True


def _denied(conn: Connection, probe: str) -> tuple[int, str] | None:
    """Run a probe that executes nothing (EXPLAIN, PREPARE); the server's error, if any (a
    client error, such as a lost connection, is raised)."""
    try:
        _rows(conn, probe)
    except pymysql.MySQLError as exc:
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        if code is None or code >= CLIENT_ERRORS:
            raise
        return code, str(exc.args[-1])
    return None
