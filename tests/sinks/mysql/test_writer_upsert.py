"""The MySQL writer's upsert on the real MariaDB server: PostgreSQL's ordering rule, within a
task (``upsert.winners``) and against the stored row (``ON DUPLICATE KEY UPDATE``'s guard).
Every branch is prepared under a gid and committed through the participant store."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from eo_jobs.protocol.mysql_xa import MySqlPreparedTransactions
from eo_jobs.sinks.mysql.upsert import winners
from eo_jobs.sinks.mysql.writer import MySqlWriter
from tests.sinks.mysql.branches import PIPELINE, commit, gid, select
from tests.support.mariadb import MariaDbDatabase

COLUMNS = ("id", "amount", "version")


@pytest.fixture
def store(mariadb_db: MariaDbDatabase) -> MySqlPreparedTransactions:
    with mariadb_db.connect() as conn, conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE orders (id BIGINT PRIMARY KEY, amount BIGINT NOT NULL, "
            "version BIGINT NULL) ENGINE=InnoDB"
        )
    found = MySqlPreparedTransactions(mariadb_db.dsn, busy_retry_seconds=10.0)
    found.ensure_schema()
    return found


def upserter(db: MariaDbDatabase, version: str | None = "version", **kw: object) -> MySqlWriter:
    return MySqlWriter(
        db.dsn,
        "orders",
        COLUMNS,
        mode="upsert",
        key_columns=("id",),
        version_column=version,
        lock_wait_timeout_s=5,
        **kw,  # type: ignore[arg-type]
    )


def batch(
    db: MariaDbDatabase,
    store: MySqlPreparedTransactions,
    rows: list[tuple[int, int, int | None]],
    batch_id: int,
    version: str | None = "version",
) -> int:
    """One task's branch of batch ``batch_id``: prepared, then committed by the store."""
    count = upserter(db, version).write(
        rows, gid=gid(batch_id), pipeline=PIPELINE, batch_id=batch_id
    )
    commit(store, gid(batch_id))
    return count


def stored(store: MySqlPreparedTransactions) -> dict[int, tuple[int, int | None]]:
    return {r[0]: (r[1], r[2]) for r in select(store, "SELECT * FROM orders ORDER BY id")}


def test_within_a_task_the_highest_version_wins_null_is_oldest_and_ties_go_to_the_later_row(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    rows: list[tuple[int, int, int | None]] = [
        (1, 10, 2),
        (1, 11, 1),  # lower: loses
        (2, 20, None),
        (2, 21, 0),  # any value beats NULL
        (3, 30, 5),
        (3, 31, None),  # NULL never beats a value
        (4, 40, 7),
        (4, 41, 7),  # tie: the later row
        (5, 50, None),
        (5, 51, None),  # NULL and NULL: the later row
    ]
    assert batch(mariadb_db, store, rows, 0) == 5  # one row per key
    assert stored(store) == {1: (10, 2), 2: (21, 0), 3: (30, 5), 4: (41, 7), 5: (51, None)}


def test_against_the_stored_row_the_guard_applies_the_same_rule(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    batch(
        mariadb_db,
        store,
        [(1, 10, 5), (2, 20, 5), (3, 30, 5), (4, 40, None), (5, 50, 5), (6, 60, None)],
        0,
    )
    count = batch(
        mariadb_db,
        store,
        [
            (1, 11, 4),  # lower: kept as stored
            (2, 21, 5),  # equal: the incoming (later) row
            (3, 31, 6),  # higher: replaces
            (4, 41, None),  # stored NULL: replaced, even by NULL
            (5, 51, None),  # incoming NULL never replaces a stored value
            (6, 61, 1),  # stored NULL: replaced
            (7, 70, None),  # new key: inserted
        ],
        1,
    )
    assert count == 7
    assert stored(store) == {
        1: (10, 5),
        2: (21, 5),
        3: (31, 6),
        4: (41, None),
        5: (50, 5),
        6: (61, 1),
        7: (70, None),
    }


def test_without_a_version_column_the_later_row_wins(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    batch(mariadb_db, store, [(1, 10, 9), (1, 11, 1), (2, 20, 9)], 0, version=None)
    assert stored(store) == {1: (11, 1), 2: (20, 9)}
    batch(mariadb_db, store, [(2, 21, 0)], 1, version=None)
    assert stored(store) == {1: (11, 1), 2: (21, 0)}


def test_the_guard_holds_when_the_version_column_comes_first_in_the_output(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    """Assignments run left to right and see earlier results; the version column is
    assigned last whatever its place among the columns (the guard is stable under its own
    assignment, so this also held with the version assigned first: ``upsert``)."""
    w = dataclasses.replace(upserter(mariadb_db), columns=("version", "amount", "id"))
    w.write([(5, 10, 1)], gid=gid(0), pipeline=PIPELINE, batch_id=0)
    commit(store, gid(0))
    w.write([(6, 11, 1), (4, 12, 1)], gid=gid(1), pipeline=PIPELINE, batch_id=1)
    commit(store, gid(1))
    w.write([(3, 13, 1)], gid=gid(2), pipeline=PIPELINE, batch_id=2)
    commit(store, gid(2))
    assert stored(store) == {1: (11, 6)}


def test_a_table_of_keys_only_keeps_its_rows(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    with mariadb_db.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE seen (id BIGINT PRIMARY KEY) ENGINE=InnoDB")
    w = MySqlWriter(mariadb_db.dsn, "seen", ("id",), mode="upsert", key_columns=("id",))
    assert w.write([(1,), (2,), (1,)], gid=gid(0), pipeline=PIPELINE, batch_id=0) == 2
    commit(store, gid(0))
    assert w.write([(2,), (3,)], gid=gid(1), pipeline=PIPELINE, batch_id=1) == 2
    commit(store, gid(1))
    assert select(store, "SELECT id FROM seen ORDER BY id") == [(1,), (2,), (3,)]


def test_many_keys_across_statements_and_chunks(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    rows = [(i % 3000, i, i // 3000) for i in range(9000)]  # each key three times, rising
    w = upserter(mariadb_db, chunk_rows=700, statement_chars=5000)
    assert w.write(rows, gid=gid(0), pipeline=PIPELINE, batch_id=0) == 3000
    commit(store, gid(0))
    found = stored(store)
    assert len(found) == 3000
    assert all(found[k] == (6000 + k, 2) for k in range(3000))


def test_the_rule_in_python_matches_postgresql_for_a_composite_key() -> None:
    rows = [("a", 1, None, "x"), ("a", 1, 3, "y"), ("a", 2, 1, "z"), ("a", 1, 3, "w")]
    assert winners(rows, [0, 1], 2) == [("a", 1, 3, "w"), ("a", 2, 1, "z")]
    assert winners(rows, [0, 1], None) == [("a", 1, 3, "w"), ("a", 2, 1, "z")]


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"mode": "merge"}, "unknown mode 'merge'"),
        ({"mode": "upsert"}, "upsert key columns []"),
        ({"mode": "upsert", "key_columns": ("nope",)}, "upsert key columns ['nope']"),
        (
            {"mode": "upsert", "key_columns": ("id",), "version_column": "v"},
            "version column 'v' is not in the output",
        ),
        (
            {"mode": "upsert", "key_columns": ("id",), "version_column": "id"},
            "version column 'id' is a key column",
        ),
        ({"dead_letter_table": "a`b" + "x" * 70}, "not a MySQL identifier"),
    ],
)
def test_a_writer_that_cannot_upsert_is_refused_when_built(
    fields: dict[str, object], words: str
) -> None:
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
        MySqlWriter("mysql://u@h:3306/db", "orders", COLUMNS, **fields)  # type: ignore[arg-type]


def test_the_writer_is_frozen_and_survives_pickling() -> None:
    w = MySqlWriter(
        "mysql://u@h:3306/db",
        "orders",
        COLUMNS,
        mode="upsert",
        key_columns=("id",),
        version_column="version",
        dead_letter_table="dead_letters",
    )
    again = pickle.loads(pickle.dumps(w))
    assert again == w
    assert again.insert_suffix == w.insert_suffix
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.mode = "append"  # type: ignore[misc]
