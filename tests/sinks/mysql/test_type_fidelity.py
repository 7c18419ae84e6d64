"""Values a pipeline produces (Spark types, through Arrow, as Python values) written by the
MySQL writer into MariaDB, prepared, committed through the participant store, and read back
equal; and what MySQL cannot hold, shown (docs/mysql.md, "Type fidelity")."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from eo_jobs.protocol.mysql_xa import MySqlPreparedTransactions
from eo_jobs.sinks.mysql.refusals import Refusal
from eo_jobs.sinks.mysql.writer import MySqlWriter
from tests.sinks.mysql.branches import PIPELINE, commit, gid, select
from tests.support.mariadb import MariaDbDatabase, MariaDbServer

TABLE = """CREATE TABLE types (
    id INT PRIMARY KEY,
    i INT, b BIGINT, d38 DECIMAL(38,9), d0 DECIMAL(38,0), f DOUBLE, flag BOOLEAN,
    s VARCHAR(100), t TEXT, dt DATE,
    ts DATETIME(6), tsz TIMESTAMP(6) NULL, ntz DATETIME(6),
    bin VARBINARY(300), blb BLOB
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"""
COLUMNS = (
    "id",
    "i",
    "b",
    "d38",
    "d0",
    "f",
    "flag",
    "s",
    "t",
    "dt",
    "ts",
    "tsz",
    "ntz",
    "bin",
    "blb",
)
PLUS_TWO = timezone(timedelta(hours=2))

SPARK_SCHEMA = pa.schema(
    [
        ("id", pa.int32()),
        ("i", pa.int32()),
        ("b", pa.int64()),
        ("d38", pa.decimal128(38, 9)),
        ("d0", pa.decimal128(38, 0)),
        ("f", pa.float64()),
        ("flag", pa.bool_()),
        ("s", pa.string()),
        ("t", pa.large_string()),
        ("dt", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),  # Spark TIMESTAMP: an instant
        ("tsz", pa.timestamp("us", tz="UTC")),
        ("ntz", pa.timestamp("us")),  # Spark TIMESTAMP_NTZ: a wall time
        ("bin", pa.binary()),
        ("blb", pa.large_binary()),
    ]
)
"""What Spark hands a Python writer through Arrow for its SQL types."""

SPARK_ROWS: list[dict[str, Any]] = [
    {
        "id": 1,
        "i": 42,
        "b": 9_007_199_254_740_993,  # 2**53 + 1: not a double
        "d38": Decimal("12345.678901234"),
        "d0": Decimal(10**37),
        "f": 0.1,
        "flag": True,
        "s": "h\u00e9llo \u65e5\u672c \U0001f600 (emoji)",
        "t": "quote ' dq \" backslash \\ NUL \x00 newline \n cr \r tab \t ctrl-z \x1a %s %%",
        "dt": date(2026, 2, 28),
        "ts": datetime(2026, 3, 29, 1, 30, 0, 123456, tzinfo=UTC),
        "tsz": datetime(2026, 3, 29, 1, 30, 0, 123456, tzinfo=UTC),
        "ntz": datetime(2026, 3, 29, 2, 30, 0, 654321),  # a wall time no zone can shift
        "bin": bytes(range(256)),
        "blb": b"\x00\xff' \\",
    },
    {
        "id": 2,
        "i": -(2**31),
        "b": -(2**63),
        "d38": Decimal("-99999999999999999999999999999.999999999"),
        "d0": Decimal("-" + "9" * 38),
        "f": -1.7976931348623157e308,
        "flag": False,
        "s": "",  # empty, not NULL
        "t": "trailing spaces   ",
        "dt": date(1, 1, 1),
        "ts": datetime(1, 1, 1, tzinfo=UTC),
        "tsz": datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),  # TIMESTAMP's first second
        "ntz": datetime(1, 1, 1),
        "bin": b"",  # empty, not NULL
        "blb": b"\x00",
    },
    {
        "id": 3,
        "i": 2**31 - 1,
        "b": 2**63 - 1,
        "d38": Decimal("99999999999999999999999999999.999999999"),
        "d0": Decimal("9" * 38),
        "f": 5e-324,  # the smallest subnormal double
        "flag": True,
        "s": "\U0001f9d1\u200d\U0001f680 zwj",
        "t": "x" * 16_000,
        "dt": date(9999, 12, 31),
        "ts": datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        "tsz": datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC),  # TIMESTAMP's last
        "ntz": datetime(9999, 12, 31, 23, 59, 59, 999999),
        "bin": b"\x80\x81 not utf-8",
        "blb": bytes(range(255, -1, -1)) * 10,
    },
    dict.fromkeys(COLUMNS) | {"id": 4},  # every value NULL
]


@pytest.fixture
def store(mariadb_db: MariaDbDatabase) -> MySqlPreparedTransactions:
    with mariadb_db.connect() as conn, conn.cursor() as cur:
        cur.execute(TABLE)
    found = MySqlPreparedTransactions(mariadb_db.dsn, busy_retry_seconds=10.0)
    found.ensure_schema()
    return found


def stored_form(value: Any) -> Any:
    """What the table gives back for a written value: an instant as its UTC wall time, a
    boolean as 0/1, any bytes-like as bytes."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


def write_and_read(
    db: MariaDbDatabase, store: MySqlPreparedTransactions, rows: list[tuple[Any, ...]]
) -> list[tuple[Any, ...]]:
    refused: list[Refusal] = []
    count = MySqlWriter(db.dsn, "types", COLUMNS).write(
        rows, gid=gid(), pipeline=PIPELINE, batch_id=0, refused=lambda _, r: refused.append(r)
    )
    assert refused == [] and count == len(rows)
    commit(store, gid())
    return select(store, "SELECT * FROM types ORDER BY id")


def test_spark_values_through_arrow_come_back_equal(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    table = pa.Table.from_pylist(SPARK_ROWS, schema=SPARK_SCHEMA)
    rows = [tuple(r.values()) for r in table.to_pylist()]  # the Python writer's values
    assert rows[0][10].tzinfo is not None  # Arrow hands instants over zone-aware
    found = write_and_read(mariadb_db, store, rows)
    assert found == [tuple(stored_form(v) for v in r) for r in rows]
    assert math.copysign(1, found[2][5]) == 1 and found[2][5] == 5e-324


def test_an_instant_in_any_zone_is_stored_as_its_utc_wall_time_whatever_the_servers_zone(
    mariadb_db: MariaDbDatabase, mariadb_server: MariaDbServer, store: MySqlPreparedTransactions
) -> None:
    """PyMySQL alone would drop the offset and store 12:00 for 12:00+02:00; a server in
    another zone would shift the TIMESTAMP column, but for the writer's session zone."""
    noon = datetime(2026, 6, 1, 12, 0, tzinfo=PLUS_TWO)
    row = (1, *[None] * 9, noon, noon, None, None, None)
    with mariadb_server.connect() as conn, conn.cursor() as cur:
        cur.execute("SET GLOBAL time_zone = '+05:00'")
    try:
        found = write_and_read(mariadb_db, store, [row])
    finally:
        with mariadb_server.connect() as conn, conn.cursor() as cur:
            cur.execute("SET GLOBAL time_zone = 'SYSTEM'")
    assert found[0][10] == found[0][11] == datetime(2026, 6, 1, 10, 0)
    instant = select(store, "SELECT UNIX_TIMESTAMP(tsz) FROM types")[0][0]
    assert instant == noon.timestamp()


def test_bytes_like_values_are_written_as_their_bytes(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    row = (1, *[None] * 12, memoryview(b"\x00\xffmv"), bytearray(b"\x00ba"))
    found = write_and_read(mariadb_db, store, [row])
    assert found[0][13:] == (b"\x00\xffmv", b"\x00ba")


def test_what_mysql_cannot_hold(
    mariadb_db: MariaDbDatabase, store: MySqlPreparedTransactions
) -> None:
    """Each limit, as MariaDB 10.11 shows it: refused rows, or values that change."""
    told: dict[int, Refusal] = {}
    blank: list[Any] = [None] * 14
    rows = [
        (1, *blank[:4], -0.0, *blank[5:]),  # DOUBLE: comes back 0.0, sign lost
        (2, *blank[:2], Decimal("1.0000000005"), *blank[3:]),  # rounded to scale 9
        (3, *blank[:4], math.inf, *blank[5:]),  # refused: no infinity
        (4, *blank[:2], Decimal("NaN"), *blank[3:]),  # refused: no NaN
        (5, *blank[:3], Decimal(10**38), *blank[4:]),  # refused: 39 digits
        (6, *blank[:10], datetime(2038, 1, 19, 3, 14, 8, tzinfo=UTC), *blank[11:]),
        (7, *blank[:10], datetime(1970, 1, 1, tzinfo=UTC), *blank[11:]),  # TIMESTAMP ends
        (8, *blank[:6], "x" * 101, *blank[7:]),  # VARCHAR(100)
        (9, *blank[:7], "x" * 65_536, *blank[8:]),  # TEXT: 65,535 bytes
        (10, *blank[:12], b"x" * 301, *blank[13:]),  # VARBINARY(300)
        (11, *blank[:11], datetime(2026, 1, 1, 0, 0, 0, 1), *blank[12:]),  # kept: DATETIME(6)
    ]
    MySqlWriter(mariadb_db.dsn, "types", COLUMNS).write(
        rows,
        gid=gid(),
        pipeline=PIPELINE,
        batch_id=0,
        refused=lambda r, why: told.update({r[0]: why}),
    )
    commit(store, gid())
    kept = {r[0]: r for r in select(store, "SELECT * FROM types ORDER BY id")}
    assert sorted(kept) == [1, 2, 11]
    assert kept[1][5] == 0.0 and math.copysign(1, kept[1][5]) == 1
    assert kept[2][3] == Decimal("1.000000001")
    assert kept[11][12] == datetime(2026, 1, 1, 0, 0, 0, 1)
    assert {i: (why.code, why.column) for i, why in told.items()} == {
        3: (None, "f"),
        4: (None, "d38"),
        5: (1264, "d0"),
        6: (1292, "tsz"),
        7: (1292, "tsz"),
        8: (1406, "s"),
        9: (1406, "t"),
        10: (1406, "bin"),
    }
