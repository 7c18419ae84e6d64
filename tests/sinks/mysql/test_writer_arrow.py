"""The writer's Arrow path (``MySqlWriter.write_arrow_on``, literals built by
``arrow_literals``) against its Python path (``write_on``, one PyMySQL literal per value), on
MariaDB: the same rows come back, the same rows are refused with the same reasons, and the
same dead letters are written."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from eo_jobs.protocol.mysql_xa import MySqlPreparedTransactions
from eo_jobs.sinks.mysql.arrow_literals import batch_literals, no_backslash_escapes
from eo_jobs.sinks.mysql.arrow_rows import python_rows
from eo_jobs.sinks.mysql.refusals import Refusal, RefusedRecordError
from eo_jobs.sinks.mysql.writer import MySqlWriter
from tests.sinks.mysql.branches import PIPELINE, commit, gid, select
from tests.sinks.mysql.test_type_fidelity import (
    PLUS_TWO,
    SPARK_ROWS,
    SPARK_SCHEMA,
    stored_form,
)
from tests.support.mariadb import MariaDbDatabase

TYPES = """CREATE TABLE {} (
    id INT PRIMARY KEY,
    i INT, b BIGINT, d38 DECIMAL(38,9), d0 DECIMAL(38,0), f DOUBLE, flag BOOLEAN,
    s VARCHAR(100), t TEXT, dt DATE,
    ts DATETIME(6), tsz TIMESTAMP(6) NULL, ntz DATETIME(6),
    bin VARBINARY(300), blb BLOB,
    d2 DECIMAL(18,2), r DOUBLE, u BIGINT UNSIGNED, d30 DECIMAL(38,30)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"""
SCHEMA = SPARK_SCHEMA.append(pa.field("d2", pa.decimal128(18, 2)))
SCHEMA = SCHEMA.append(pa.field("r", pa.float32())).append(pa.field("u", pa.uint64()))
SCHEMA = SCHEMA.append(pa.field("d30", pa.decimal128(38, 30)))
EXTRA_ROWS: list[dict[str, Any]] = [
    {
        "id": 5,
        "i": 0,
        "b": 0,
        "d38": Decimal("0E-9"),  # Arrow's own text is "0E-9"
        "d0": Decimal(0),
        "f": 1e-300,
        "flag": False,
        "s": "NULL",  # the text, not the value
        "t": "'NULL'",
        "dt": date(1970, 1, 1),
        "ts": datetime(2026, 6, 1, 12, 0, tzinfo=PLUS_TWO),  # no microseconds
        "tsz": datetime(2026, 6, 1, 12, 0, tzinfo=PLUS_TWO),
        "ntz": datetime(2026, 6, 1, 12, 0),
        "d2": Decimal("-0.05"),
        "r": 0.1,  # a FLOAT: 0.10000000149011612 as a double
        "u": 2**64 - 1,
    },
    {
        "id": 6,
        "d38": Decimal("0.000000100"),  # Arrow's own text is "1.00E-7"
        "d30": Decimal("0.000000123456789012345678901234"),  # more digits than a double
        "f": -0.0,
        "s": "back\\slash\\",
        "t": "\\' \\0 \\n a backslash before each",
        "d2": Decimal("9999999999999999.99"),
        "r": 3.4028234663852886e38,
    },
    {
        "id": 7,
        "d38": Decimal("0.000000001"),
        "f": 123456789012345678.0,
        "s": "\n\r\t\x1a\x00 controls",
        "t": "",
        "d2": Decimal("0.00"),
        "r": -1.5,
    },
    {"id": 8, "f": 1e21, "s": "\U0001f600" * 25, "t": "\u00e9\\\u00e9'\u00e9\"", "b": 2**53},
]
FAST = [c for c in SCHEMA.names if c not in ("bin", "blb")]
"""The columns Arrow writes itself (binary takes the Python path)."""


def spark_table(columns: Sequence[str]) -> Any:
    rows = [{c: r.get(c) for c in SCHEMA.names} for r in [*SPARK_ROWS, *EXTRA_ROWS]]
    return pa.Table.from_pylist(rows, schema=SCHEMA).select(list(columns))


@pytest.fixture
def store(mariadb_db: MariaDbDatabase) -> MySqlPreparedTransactions:
    with mariadb_db.connect() as conn, conn.cursor() as cur:
        for name in ("by_python", "by_arrow"):
            cur.execute(TYPES.format(name))
    found = MySqlPreparedTransactions(mariadb_db.dsn, busy_retry_seconds=10.0)
    found.ensure_schema()
    return found


def both_paths(
    db: MariaDbDatabase, store: MySqlPreparedTransactions, table: Any
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """``table`` written by the Python path into by_python and by the Arrow path (batches of
    3 rows) into by_arrow, each committed; both tables read back."""
    columns = tuple(table.column_names)
    refused: list[Refusal] = []
    python = MySqlWriter(db.dsn, "by_python", columns)
    rows = list(python_rows(table.to_batches()))
    count = python.write(
        rows, gid=gid(0), pipeline=PIPELINE, batch_id=0, refused=lambda _, r: refused.append(r)
    )
    commit(store, gid(0))
    arrow = MySqlWriter(db.dsn, "by_arrow", columns)
    count_arrow = arrow.write_arrow(
        table.to_batches(max_chunksize=3),
        gid=gid(1),
        pipeline=PIPELINE,
        batch_id=1,
        refused=lambda _, r: refused.append(r),
    )
    commit(store, gid(1))
    assert refused == [] and count == count_arrow == table.num_rows
    names = ", ".join(columns)
    return (
        select(store, f"SELECT {names} FROM by_python ORDER BY id"),
        select(store, f"SELECT {names} FROM by_arrow ORDER BY id"),
    )


def test_every_type_comes_back_from_the_arrow_path_as_from_the_python_path(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    table = spark_table(FAST)
    for batch in table.to_batches(max_chunksize=3):
        built = batch_literals(batch, no_backslash_escapes=False)
        assert built is not None and built.unsendable is None  # no Python fallback
    by_python, by_arrow = both_paths(mariadb_db, store, table)
    assert by_arrow == by_python
    expected = [tuple(stored_form(v) for v in r.values()) for r in table.to_pylist()]
    assert by_arrow == expected


def test_a_batch_with_a_type_arrow_does_not_write_takes_the_python_path(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    table = spark_table(SCHEMA.names)
    assert batch_literals(table.to_batches()[0], no_backslash_escapes=False) is None
    by_python, by_arrow = both_paths(mariadb_db, store, table)
    assert by_arrow == by_python


@pytest.mark.parametrize("mode", ["", "NO_BACKSLASH_ESCAPES"])
def test_string_literals_read_back_as_the_text_in_either_escaping_mode(
    mariadb_db: MariaDbDatabase, mode: str
) -> None:
    texts = ["", "NULL", "'", "''", '"', "\\", "\\'", "\x00", "\n\r\x1a\t", "\U0001f600 \u00e9"]
    batch = pa.record_batch([pa.array([*texts, None])], names=["s"])
    with mariadb_db.connect() as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = %s", (mode,))
        assert no_backslash_escapes(conn) == bool(mode)
        built = batch_literals(batch, no_backslash_escapes(conn))
        assert built is not None
        found = []
        for literal in built.rows.to_pylist():
            cur.execute(f"SELECT {literal[1:-1]}")
            found.append((cur.fetchone() or (None,))[0])
    assert found == [*texts, None]


ORDERS = (
    "CREATE TABLE orders (id BIGINT PRIMARY KEY, amount INT NOT NULL, code VARCHAR(3), "
    "qty TINYINT CHECK (qty > 0), score DOUBLE, note VARCHAR(20) CHARACTER SET utf8mb3) "
    "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
)
ORDER_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("amount", pa.int64()),
        ("code", pa.string()),
        ("qty", pa.int64()),
        ("score", pa.float64()),
        ("note", pa.string()),
    ]
)
COLUMNS = tuple(ORDER_SCHEMA.names)
BAD: dict[int, dict[str, Any]] = {
    3: {"amount": None},  # NOT NULL
    7: {"score": float("nan")},  # unsendable: refused before its statement
    10: {},  # the stored row 10
    50: {"code": "abcd"},  # too long
    51: {"qty": 1000},  # out of range
    60: {"note": "\U0001f600"},  # not utf8mb3
    120: {"qty": -1},  # CHECK
    130: {"score": float("-inf")},
    199: {"amount": None},
}


def order_rows() -> Any:
    """200 orders with the refused ones of ``BAD`` scattered, and id 61 twice."""
    ids = [*range(62), 61, *range(62, 200)]
    rows = []
    for i in ids:
        values = {"id": i, "amount": i, "code": "ab", "qty": 1, "score": i / 7, "note": "ok"}
        values.update(BAD.get(i, {}))
        rows.append(values)
    return pa.Table.from_pylist(rows, schema=ORDER_SCHEMA)


@pytest.fixture
def orders(mariadb_db: MariaDbDatabase) -> MySqlPreparedTransactions:
    with mariadb_db.connect() as conn, conn.cursor() as cur:
        cur.execute(ORDERS)
    found = MySqlPreparedTransactions(mariadb_db.dsn, busy_retry_seconds=10.0)
    found.ensure_schema()
    return found


def fresh_orders(db: MariaDbDatabase) -> None:
    with db.connect() as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM orders")
        cur.execute("INSERT INTO orders (id, amount) VALUES (10, 1)")


def run(
    db: MariaDbDatabase, store: MySqlPreparedTransactions, path: str, task: int, **kw: Any
) -> tuple[int, list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """One path's write of ``order_rows`` (committed): the count, what was told of refused
    rows (id, code, column, message, reason) and the table."""
    fresh_orders(db)
    writer = MySqlWriter(
        db.dsn, "orders", COLUMNS, lock_wait_timeout_s=5, chunk_rows=16, statement_chars=700, **kw
    )
    told: list[tuple[Any, ...]] = []

    def tell(row: Sequence[Any], why: Refusal) -> None:
        told.append((row, why.code, why.column, why.message, why.reason("orders")))

    batches = order_rows().to_batches(max_chunksize=90)
    refused = None if "dead_letter_table" in kw else tell
    common: dict[str, Any] = {"gid": gid(0, task), "pipeline": PIPELINE, "batch_id": 4}
    if path == "python":
        count = writer.write(list(python_rows(batches)), refused=refused, **common)
    else:
        count = writer.write_arrow(batches, refused=refused, **common)
    commit(store, gid(0, task))
    return count, told, select(store, "SELECT * FROM orders ORDER BY id")


UNSENDABLE = {7, 130}


def by_id(told: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """What was told, by id (the second id 61 last), a row's NaN or inf as text."""
    return sorted((str(t[0]), *t[1:]) for t in told)


def test_refused_rows_are_told_as_by_the_python_path(
    mariadb_db: MariaDbDatabase, orders: MySqlPreparedTransactions
) -> None:
    """The same rows, codes, columns, messages and reasons. The order obeys ``refusals``'s
    rule on both paths (the server's refusals in input order, an unsendable row when it is
    met), but where an unsendable row falls among them depends on statement boundaries,
    which differ (the Arrow path's never span two record batches)."""
    by_python = run(mariadb_db, orders, "python", 0)
    by_arrow = run(mariadb_db, orders, "arrow", 1)
    assert by_arrow[0] == by_python[0] == 200 - len(BAD)
    for told in (by_python[1], by_arrow[1]):
        assert [t[0][0] for t in told if t[0][0] not in UNSENDABLE] == [
            3, 10, 50, 51, 60, 61, 120, 199,
        ]  # fmt: skip
        assert sorted(t[0][0] for t in told if t[0][0] in UNSENDABLE) == sorted(UNSENDABLE)
    assert by_id(by_arrow[1]) == by_id(by_python[1])
    assert by_arrow[2] == by_python[2]


def test_refused_rows_become_the_same_dead_letters_as_by_the_python_path(
    mariadb_db: MariaDbDatabase, orders: MySqlPreparedTransactions
) -> None:
    dead = "eo_dead_letters"
    query = f"SELECT pipeline, batch_id, raw, reason FROM {dead} ORDER BY raw, reason"
    by_python = run(mariadb_db, orders, "python", 0, dead_letter_table=dead)
    letters_python = select(orders, query)
    with mariadb_db.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DELETE FROM {dead}")
    by_arrow = run(mariadb_db, orders, "arrow", 1, dead_letter_table=dead)
    letters_arrow = select(orders, query)
    assert by_arrow == by_python
    assert len(letters_arrow) == len(BAD) + 1  # the second id 61 too
    assert letters_arrow == letters_python


def test_without_a_callback_a_refused_row_fails_the_arrow_write_naming_the_column(
    mariadb_db: MariaDbDatabase, orders: MySqlPreparedTransactions
) -> None:
    batch = pa.Table.from_pylist(
        [{"id": 1, "amount": 1}, {"id": 2, "amount": 2, "code": "toolong"}], schema=ORDER_SCHEMA
    ).to_batches()
    writer = MySqlWriter(mariadb_db.dsn, "orders", COLUMNS, lock_wait_timeout_s=5)
    with pytest.raises(RefusedRecordError) as failed:
        writer.write_arrow(batch, gid=gid(), pipeline=PIPELINE, batch_id=4)
    said = str(failed.value)
    assert "batch 4: orders refused a record" in said
    assert "MySQL error 1406 (DATA_TOO_LONG), column code" in said
    assert orders.in_doubt("") == []
    assert select(orders, "SELECT id FROM orders") == []


def test_a_timestamp_literal_is_the_instants_utc_wall_time() -> None:
    """Unit check of the text (the tables above check what the server stores)."""
    instants = pa.array(
        [datetime(2026, 6, 1, 12, 0, 0, 5, tzinfo=PLUS_TWO)], pa.timestamp("us", "UTC")
    )
    walls = pa.array([datetime(2026, 6, 1, 12, 0)], pa.timestamp("ms"))
    built = batch_literals(pa.record_batch([instants, walls], names=["a", "b"]), False)
    assert built is not None
    assert built.rows.to_pylist() == ["('2026-06-01 10:00:00.000005','2026-06-01 12:00:00.000000')"]
    assert datetime(2026, 6, 1, 10, 0, 0, 5, tzinfo=UTC) == datetime(
        2026, 6, 1, 12, 0, 0, 5, tzinfo=PLUS_TWO
    )


def test_an_upsert_from_arrow_keeps_one_winner_per_key_as_the_python_path(
    mariadb_db: MariaDbDatabase, orders: MySqlPreparedTransactions
) -> None:
    """An upsert takes the Python path inside ``write_arrow_on`` (``upsert.winners``)."""
    rows = [
        {"id": 1, "amount": 1, "qty": 2},
        {"id": 2, "amount": 2, "qty": 1},
        {"id": 1, "amount": 3, "qty": 1},  # a lower version: loses to the first row
        {"id": 2, "amount": 4, "qty": 1},  # an equal version: the later row wins
    ]
    table = pa.Table.from_pylist(rows, schema=ORDER_SCHEMA)
    writer = MySqlWriter(
        mariadb_db.dsn,
        "orders",
        COLUMNS,
        lock_wait_timeout_s=5,
        mode="upsert",
        key_columns=("id",),
        version_column="qty",
    )
    count = writer.write_arrow(
        table.to_batches(max_chunksize=2), gid=gid(), pipeline=PIPELINE, batch_id=0
    )
    commit(orders, gid())
    assert count == 2
    assert select(orders, "SELECT id, amount, qty FROM orders ORDER BY id") == [
        (1, 1, 2),
        (2, 4, 1),
    ]
