"""Rows a MariaDB table refuses: each one goes to the callback or becomes a dead letter in the
same XA branch, every other row is kept, and without either the write fails naming the table,
the column and the error. Every branch is prepared under a gid and committed (or rolled back)
through the participant store."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import date
from typing import Any

import pymysql
import pytest
from pymysql.constants import ER

from eo_jobs.protocol.mysql_xa import MySqlPreparedTransactions, xid_of
from eo_jobs.protocol.participants import Outcome
from eo_jobs.sinks.mysql.dead_letters import DEAD_LETTER_COLUMNS, DeadLetters
from eo_jobs.sinks.mysql.refusals import Refusal, RefusedRecordError
from eo_jobs.sinks.mysql.writer import MySqlWriter
from tests.sinks.mysql.branches import PIPELINE, commit, gid, select
from tests.support.mariadb import MariaDbDatabase, MariaDbServer

COLUMNS = ("id", "amount", "code", "day", "qty", "parent", "note")
GOOD: tuple[Any, ...] = (0, 1, "ab", date(2026, 1, 1), 1, 1, "ok")


@pytest.fixture
def store(mariadb_db: MariaDbDatabase) -> MySqlPreparedTransactions:
    """An orders table with one rule of each kind, and a parent table for its foreign key."""
    with mariadb_db.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE parents (id INT PRIMARY KEY) ENGINE=InnoDB")
        cur.execute("INSERT INTO parents VALUES (1)")
        cur.execute(
            "CREATE TABLE orders (id BIGINT PRIMARY KEY, amount INT NOT NULL, "
            "code VARCHAR(3), day DATE, qty TINYINT CHECK (qty > 0), parent INT, "
            "note VARCHAR(20) CHARACTER SET utf8mb3, "
            "FOREIGN KEY (parent) REFERENCES parents (id)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
        )
    found = MySqlPreparedTransactions(mariadb_db.dsn, busy_retry_seconds=10.0)
    found.ensure_schema()
    return found


def row(id_: int, **changes: Any) -> tuple[Any, ...]:
    values = dict(zip(COLUMNS, GOOD, strict=True))
    values.update(id=id_, **changes)
    return tuple(values[c] for c in COLUMNS)


def writer(db: MariaDbDatabase, **kw: Any) -> MySqlWriter:
    return MySqlWriter(db.dsn, "orders", COLUMNS, lock_wait_timeout_s=5, **kw)


def ids(store: MySqlPreparedTransactions) -> list[int]:
    return [int(r[0]) for r in select(store, "SELECT id FROM orders ORDER BY id")]


REFUSED: dict[int, tuple[dict[str, Any], int | None, str | None]] = {
    # id: (changed value, error number, column the message names)
    2: ({"amount": None}, ER.BAD_NULL_ERROR, "amount"),
    3: ({"code": "abcd"}, ER.DATA_TOO_LONG, "code"),
    4: ({"qty": 1000}, ER.WARN_DATA_OUT_OF_RANGE, "qty"),
    5: ({"day": "2026-02-30"}, ER.TRUNCATED_WRONG_VALUE, "day"),
    6: ({"qty": -1}, ER.CONSTRAINT_FAILED, None),
    7: ({"parent": 99}, ER.NO_REFERENCED_ROW_2, "parent"),
    8: ({"note": "\U0001f600"}, ER.TRUNCATED_WRONG_VALUE_FOR_FIELD, "note"),
    9: ({"amount": "many"}, ER.TRUNCATED_WRONG_VALUE_FOR_FIELD, "amount"),
    10: ({}, ER.DUP_ENTRY, None),  # the stored row 10
    12: ({"amount": float("nan")}, None, "amount"),  # no MySQL number is NaN
}


def test_each_refused_row_reaches_the_callback_and_every_other_row_is_kept(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    with mariadb_db.connect() as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO orders (id, amount) VALUES (10, 1)")
    rows = [row(1), *(row(i, **REFUSED[i][0]) for i in sorted(REFUSED)), row(11), row(13)]
    told: list[tuple[Sequence[Any], Refusal]] = []
    count = writer(mariadb_db).write(
        rows,
        gid=gid(),
        pipeline=PIPELINE,
        batch_id=0,
        refused=lambda r, why: told.append((r, why)),
    )
    assert count == 3
    assert ids(store) == [10]  # nothing visible before the commit
    commit(store, gid())
    assert ids(store) == [1, 10, 11, 13]
    # Server refusals in input order; an unsendable value (12) is told when it is met,
    # before its statement runs.
    assert [r[0] for r, _ in told] == [12, *sorted(set(REFUSED) - {12})]
    for r, why in told:
        _, code, column = REFUSED[r[0]]
        assert (why.code, why.column) == (code, column), why
        assert why.message
    by_id = {r[0]: why for r, why in told}
    check = by_id[6]
    assert check.constraint is not None and "qty" in check.constraint
    assert by_id[10].constraint == "PRIMARY"
    assert store.query("SELECT rows_written FROM eo_markers") == [(3,)]


def test_a_refused_statement_writes_none_of_its_rows_and_does_not_fail_the_branch(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    """What the writer's isolation rests on, checked on the server without the writer."""
    xid = xid_of(gid(), mariadb_db.name).sql()
    with mariadb_db.connect() as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'STRICT_TRANS_TABLES'")
        cur.execute(f"XA START {xid}")
        with pytest.raises(pymysql.IntegrityError):
            cur.execute("INSERT INTO orders (id, amount) VALUES (1, 1), (2, NULL), (3, 3)")
        cur.execute("INSERT INTO orders (id, amount) VALUES (4, 4)")
        cur.execute(
            "INSERT INTO eo_markers (gid, pipeline, batch_id, rows_written) VALUES (%s, %s, 0, 1)",
            (gid(), PIPELINE),
        )
        cur.execute(f"XA END {xid}")
        cur.execute(f"XA PREPARE {xid}")
    commit(store, gid())
    assert ids(store) == [4]


def test_halving_finds_scattered_refusals_among_many_rows_across_statements(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    bad = {17, 500, 501, 1999}
    rows = [row(i, amount=None) if i in bad else row(i) for i in range(2000)]
    told: list[int] = []
    w = writer(mariadb_db, chunk_rows=300, statement_chars=4000)
    count = w.write(
        rows, gid=gid(), pipeline=PIPELINE, batch_id=0, refused=lambda r, _: told.append(r[0])
    )
    commit(store, gid())
    assert count == 1996 and told == sorted(bad)
    assert ids(store) == [i for i in range(2000) if i not in bad]


def test_without_a_callback_or_a_dead_letter_table_the_write_fails_naming_table_column_and_error(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    with pytest.raises(RefusedRecordError) as failed:
        writer(mariadb_db).write(
            [row(1), row(2, code="toolong")], gid=gid(), pipeline=PIPELINE, batch_id=4
        )
    said = str(failed.value)
    assert "batch 4: orders refused a record" in said
    assert "MySQL error 1406 (DATA_TOO_LONG), column code" in said
    assert "Data too long for column 'code'" in said
    assert store.in_doubt("") == []  # rolled back, nothing prepared
    assert ids(store) == []


def test_the_session_is_strict_even_when_the_server_is_not(
    mariadb_db: MariaDbDatabase, mariadb_server: MariaDbServer, store: MySqlPreparedTransactions
) -> None:
    """A server whose default sql_mode is lenient would store NULL as 0 and cut 'abcd' to
    'abc' with a warning; the writer's session refuses both rows instead."""
    with mariadb_server.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.sql_mode")
        (before,) = cur.fetchone() or ("",)
        cur.execute("SET GLOBAL sql_mode = ''")
    try:
        told: list[int] = []
        writer(mariadb_db).write(
            [row(1, amount=None), row(2, code="abcd"), row(3)],
            gid=gid(),
            pipeline=PIPELINE,
            batch_id=0,
            refused=lambda r, _: told.append(r[0]),
        )
    finally:
        with mariadb_server.connect() as conn, conn.cursor() as cur:
            cur.execute("SET GLOBAL sql_mode = %s", (before,))
    commit(store, gid())
    assert told == [1, 2]
    assert select(store, "SELECT id, amount, code FROM orders") == [(3, 1, "ab")]


DEAD = "eo_dead_letters"


def dead(store: MySqlPreparedTransactions) -> list[tuple[Any, ...]]:
    return select(store, f"SELECT pipeline, batch_id, raw, reason FROM {DEAD}")


def test_refused_rows_become_dead_letters_in_the_same_branch_and_commit_with_it(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    w = writer(mariadb_db, dead_letter_table=DEAD)
    letters = DeadLetters(PIPELINE, 7, "orders", COLUMNS)
    letters.add('{"broken json', "the source record is not JSON")  # the parse's own
    count = w.write(
        [row(1), row(2, amount=None), row(3, note="caf\u00e9 \U0001f600")],
        gid=gid(7),
        pipeline=PIPELINE,
        batch_id=7,
        dead_letters=letters,
    )
    assert count == 1 and len(letters.rows) == 3
    assert dead(store) == []  # the table exists (made before XA START), the letters are unseen
    commit(store, gid(7))
    assert ids(store) == [1]
    found = dead(store)
    assert [r[:2] for r in found] == [(PIPELINE, 7)] * 3
    assert found[0][2:] == ('{"broken json', "the source record is not JSON")
    raw = json.loads(found[1][2])
    assert raw == {**dict(zip(COLUMNS, row(2, amount=None), strict=True)), "day": "2026-01-01"}
    assert found[1][3].startswith(
        "orders refused the record: MySQL error 1048 (BAD_NULL_ERROR), column amount: "
    )
    assert json.loads(found[2][2])["note"] == "caf\u00e9 \U0001f600"
    assert "\\ud83d\\ude00" in found[2][2]  # raw is ASCII: it fits any charset
    columns = select(
        store,
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
        f"AND TABLE_NAME = '{DEAD}' ORDER BY ORDINAL_POSITION",
    )
    assert tuple(c[0] for c in columns) == (*DEAD_LETTER_COLUMNS, "recorded_at")


def test_dead_letters_roll_back_with_their_branch(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    w = writer(mariadb_db, dead_letter_table=DEAD)
    w.write([row(1), row(2, amount=None)], gid=gid(), pipeline=PIPELINE, batch_id=0)
    assert store.rollback(gid()) == Outcome.ROLLED_BACK
    assert ids(store) == [] and dead(store) == []


def test_an_upsert_that_would_null_a_not_null_column_is_refused_alone(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    told: list[Sequence[Any]] = []
    w = writer(mariadb_db, mode="upsert", key_columns=("id",))
    w.write([row(1), row(2)], gid=gid(0), pipeline=PIPELINE, batch_id=0)
    commit(store, gid(0))
    count = w.write(
        [row(1, amount=5), row(2, amount=None)],
        gid=gid(1),
        pipeline=PIPELINE,
        batch_id=1,
        refused=lambda r, _: told.append(r),
    )
    commit(store, gid(1))
    assert count == 1 and [r[0] for r in told] == [2]
    assert select(store, "SELECT id, amount FROM orders ORDER BY id") == [(1, 5), (2, 1)]


def test_an_array_value_is_a_spec_error_not_a_refused_row(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    with pytest.raises(TypeError, match=r"column note: a list value.*to_json"):
        writer(mariadb_db, dead_letter_table=DEAD).write(
            [row(1, note=[1, 2])], gid=gid(), pipeline=PIPELINE, batch_id=0
        )
    assert store.in_doubt("") == []


def test_without_a_gid_the_rows_and_their_dead_letters_commit_in_one_transaction(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    """At-least-once and idempotent modes: no branch, one committed transaction."""
    w = writer(mariadb_db, dead_letter_table=DEAD)
    assert w.write([row(1), row(2, code="long")], gid=None, pipeline=PIPELINE, batch_id=3) == 1
    assert store.in_doubt("") == []
    assert ids(store) == [1]
    assert [r[:2] for r in dead(store)] == [(PIPELINE, 3)]


@pytest.mark.parametrize(
    ("message", "column", "constraint"),
    [
        ("Check constraint 'orders_chk_1' is violated.", None, "orders_chk_1"),  # MySQL 8
        ("CONSTRAINT `orders.qty` failed for `db`.`orders`", None, "orders.qty"),  # MariaDB
        ("Column 'amount' cannot be null", "amount", None),
        ("Incorrect date value: '2026-02-30' for column `d``b`.`t`.`day` at row 2", "day", None),
        ("Duplicate entry '7' for key 'PRIMARY'", None, "PRIMARY"),
    ],
)
def test_a_refusal_names_the_column_and_constraint_its_message_names(
    message: str, column: str | None, constraint: str | None
) -> None:
    found = Refusal.of(pymysql.OperationalError(1, message))
    assert (found.column, found.constraint) == (column, constraint)
