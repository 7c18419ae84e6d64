"""eo's JVM writer tasks for MySQL/MariaDB (``dev.eo.writer.mysql``) against a real Spark and a
real MariaDB, each beside the Python writer's path (``MySqlKind.run_task``, the Arrow literals)
on the same frame: the same table contents, the same dead letters with the same reasons, the
same branches (prepared under the xid of the gid, recovered and committed by the participant
store)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from functools import partial
from typing import Any

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import DataFrame, SparkSession
from tests.sinks.mysql.test_type_fidelity import SPARK_ROWS
from tests.sinks.mysql.test_writer_arrow import EXTRA_ROWS
from tests.support.mariadb import MariaDbDatabase
from tests.support.spark import dead_letter_frame, writer_session
from tests.support.writer_tasks import kinds_task

from eo_jobs.protocol.mysql_xa import MySqlPreparedTransactions
from eo_jobs.protocol.participants import Outcome
from eo_jobs.runtime.arrow_writer import ArrowWriteJob, arrow_task_writer
from eo_jobs.runtime.jvm_writer import JvmWriter, jvm_has_class
from eo_jobs.runtime.task import WriterTask
from eo_jobs.sinks.mysql.writer import MySqlWriter
from eo_jobs.sinks.postgres.arrow_copy import DL_RAW, DL_REASON
from eo_jobs.sinks.postgres.refusals import DEAD_LETTER_COLUMNS

pytestmark = pytest.mark.spark

TYPES_DDL = """CREATE TABLE {} (
    id INT PRIMARY KEY,
    i INT, b BIGINT, d38 DECIMAL(38,9), d0 DECIMAL(38,0), f DOUBLE, flag BOOLEAN,
    s VARCHAR(100), t TEXT, dt DATE,
    ts DATETIME(6), tsz TIMESTAMP(6) NULL, ntz DATETIME(6),
    bin VARBINARY(300), blb BLOB,
    d2 DECIMAL(18,2), r DOUBLE, d30 DECIMAL(38,30), tiny TINYINT, small SMALLINT
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"""
TYPES_SCHEMA = (
    "id INT, i INT, b BIGINT, d38 DECIMAL(38,9), d0 DECIMAL(38,0), f DOUBLE, flag BOOLEAN, "
    "s STRING, t STRING, dt DATE, ts TIMESTAMP, tsz TIMESTAMP, ntz TIMESTAMP_NTZ, bin BINARY, "
    "blb BINARY, d2 DECIMAL(18,2), r FLOAT, d30 DECIMAL(38,30), tiny TINYINT, small SMALLINT"
)
TYPES_COLUMNS = tuple(part.split()[0] for part in TYPES_SCHEMA.split(", "))
MORE_ROWS: list[dict[str, Any]] = [
    {"id": 9, "tiny": -128, "small": 32767, "f": 1e16, "r": -0.0, "s": "\\'\"\x00\x1a"},
    {"id": 10, "tiny": 127, "small": -32768, "f": 0.0001, "d2": Decimal("-12345.67")},
    {
        "id": 11,
        "ts": datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        "ntz": datetime(2026, 10, 25, 2, 30),
        "dt": date(1000, 1, 1),
        "t": "tab\there, new\nline, é €",
    },
]


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with writer_session("eo-jvm-mysql-test") as session:
        yield session


_task = partial(kinds_task, query_id="6f1c9a8e-0000-4000-8000-000000000002")


def _jvm(spark: SparkSession, writer: MySqlWriter) -> JvmWriter:
    chosen = JvmWriter.choose(writer, None, lambda name: jvm_has_class(spark, name))
    assert isinstance(chosen, JvmWriter), chosen
    return chosen


def _python(frame: DataFrame, task: WriterTask, columns: list[str]) -> list[Any]:
    return ArrowWriteJob(arrow_task_writer(task)).run(frame, columns, task.batch_id)


def _sql(db: MariaDbDatabase, statement: str) -> list[tuple[Any, ...]]:
    conn = db.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute(statement)
            return [tuple(row) for row in cur.fetchall()]
    finally:
        conn.close()


def _types_frame(spark: SparkSession) -> DataFrame:
    rows = []
    for given in [*SPARK_ROWS, *EXTRA_ROWS, *MORE_ROWS]:
        rows.append(tuple(given.get(c) for c in TYPES_COLUMNS))
    return spark.createDataFrame(rows, TYPES_SCHEMA).coalesce(1)


def test_the_session_loads_mariadb_connector_j_and_the_writer_chooses_the_jvm_for_mysql(
    spark: SparkSession, mariadb_db: MariaDbDatabase
) -> None:
    writer = MySqlWriter(dsn=mariadb_db.dsn, table="t", columns=("id",))

    assert isinstance(_jvm(spark, writer), JvmWriter)
    missing = JvmWriter.choose(writer, None, lambda name: name != "org.mariadb.jdbc.Driver")
    assert missing == (
        "the mysql JDBC driver org.mariadb.jdbc.Driver is not on Spark's class path "
        "(scripts/build-writer.sh puts it beside eo-writer.jar)"
    )


@pytest.mark.parametrize("two_phase", [True, False])
def test_every_type_lands_value_for_value_as_the_python_writer_stores_it(
    spark: SparkSession, mariadb_db: MariaDbDatabase, two_phase: bool
) -> None:
    for table in ("types_jvm", "types_py"):
        _sql(mariadb_db, TYPES_DDL.format(table))
    store = MySqlPreparedTransactions(mariadb_db.dsn, busy_retry_seconds=10.0)
    store.ensure_schema()
    frame = _types_frame(spark)
    columns = list(TYPES_COLUMNS)
    jvm = MySqlWriter(dsn=mariadb_db.dsn, table="types_jvm", columns=TYPES_COLUMNS)
    python = MySqlWriter(dsn=mariadb_db.dsn, table="types_py", columns=TYPES_COLUMNS)

    results = _jvm(spark, jvm).run(frame, _task(jvm, two_phase=two_phase), columns)
    expected = _python(frame, _task(python, two_phase=two_phase), columns)

    assert results is not None and [r[2:] for r in results] == [(frame.count(), 0)]
    assert [r[2:] for r in expected] == [r[2:] for r in results]
    if two_phase:
        assert _sql(mariadb_db, "SELECT count(*) FROM types_jvm") == [(0,)]  # until decided
        # The participant store finds the JVM branch by the xid of its gid and commits it.
        assert sorted(d.gid for d in store.in_doubt("eo1:")) == sorted(
            r[1] for r in [*results, *expected]
        )
        for _, gid, _, _ in [*results, *expected]:
            assert store.commit(gid) == Outcome.COMMITTED
        markers = _sql(mariadb_db, "SELECT gid, pipeline, batch_id, rows_written FROM eo_markers")
        assert sorted(markers) == sorted(
            (r[1], "test/kinds", 5, r[2]) for r in [*results, *expected]
        )
    stored = _sql(mariadb_db, "SELECT * FROM types_jvm ORDER BY id")
    assert stored == _sql(mariadb_db, "SELECT * FROM types_py ORDER BY id")
    assert len(stored) == len(SPARK_ROWS) + len(EXTRA_ROWS) + len(MORE_ROWS)
    # A few values said outright (the Python path's fidelity is tests/sinks/mysql's).
    by_id = {row[0]: dict(zip(TYPES_COLUMNS, row, strict=True)) for row in stored}
    assert by_id[1]["t"] == SPARK_ROWS[0]["t"] and by_id[1]["bin"] == bytes(range(256))
    assert by_id[2]["d38"] == Decimal("-99999999999999999999999999999.999999999")
    assert by_id[9]["s"] == "\\'\"\x00\x1a" and by_id[9]["tiny"] == -128
    assert by_id[11]["ts"] == datetime(1969, 12, 31, 23, 59, 59, 999999)
    assert store.in_doubt("") == []


REFUSING_DDL = """CREATE TABLE {} (
    id INT PRIMARY KEY, name VARCHAR(4) NOT NULL, n INT, ratio DOUBLE,
    CONSTRAINT small_n CHECK (n < 100)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"""
REFUSING_SCHEMA = "id INT, name STRING, n INT, ratio DOUBLE"
REFUSED_ROWS = [
    (1, "ok", 1, 0.5),
    (2, None, 2, 0.5),  # 1048 BAD_NULL_ERROR
    (3, "ok", 3, 0.5),
    (4, "too long", 4, 0.5),  # 1406 DATA_TOO_LONG
    (5, "ok", 500, 0.5),  # 4025 CONSTRAINT_FAILED
    (6, "ok", 6, float("nan")),  # not sendable
    (7, "ok", 7, 0.5),
    (1, "dup", 8, 0.5),  # 1062 DUP_ENTRY (PRIMARY)
    (9, "ok", 9, float("-inf")),  # not sendable
    (10, "ok", 10, 0.5),
]


def _letters(db: MariaDbDatabase, table: str, name: str) -> list[tuple[Any, ...]]:
    found = _sql(db, f"SELECT pipeline, batch_id, raw, reason FROM {table}")
    return sorted((p, b, raw, str(reason).replace(name, "T")) for p, b, raw, reason in found)


@pytest.mark.parametrize("two_phase", [True, False])
def test_refused_rows_are_dead_letters_once_with_the_same_reasons_as_the_python_writer(
    spark: SparkSession, mariadb_db: MariaDbDatabase, two_phase: bool
) -> None:
    for table in ("strict_jvm", "strict_py"):
        _sql(mariadb_db, REFUSING_DDL.format(table))
    store = MySqlPreparedTransactions(mariadb_db.dsn, busy_retry_seconds=10.0)
    store.ensure_schema()
    frame = spark.createDataFrame(REFUSED_ROWS, REFUSING_SCHEMA).coalesce(1)
    columns = ["id", "name", "n", "ratio"]
    jvm = MySqlWriter(dsn=mariadb_db.dsn, table="strict_jvm", columns=tuple(columns))
    python = MySqlWriter(dsn=mariadb_db.dsn, table="strict_py", columns=tuple(columns))

    results = _jvm(spark, jvm).run(
        frame, _task(jvm, two_phase=two_phase, refused_table="strict_jvm_dl"), columns
    )
    expected = _python(
        frame, _task(python, two_phase=two_phase, refused_table="strict_py_dl"), columns
    )

    assert results is not None and [r[2:] for r in results] == [(4, 6)]
    assert [r[2:] for r in expected] == [(4, 6)]
    if two_phase:
        for _, gid, _, _ in [*results, *expected]:
            assert store.commit(gid) == Outcome.COMMITTED
    ids = _sql(mariadb_db, "SELECT id, name FROM strict_jvm ORDER BY id")
    assert ids == [(1, "ok"), (3, "ok"), (7, "ok"), (10, "ok")]
    assert ids == _sql(mariadb_db, "SELECT id, name FROM strict_py ORDER BY id")
    letters = _letters(mariadb_db, "strict_jvm_dl", "strict_jvm")
    assert letters == _letters(mariadb_db, "strict_py_dl", "strict_py")
    by_id = {json.loads(str(raw))["id"]: str(reason) for _, _, raw, reason in letters}
    assert sorted(by_id) == [1, 2, 4, 5, 6, 9]  # each refused row once
    assert "MySQL error 1048 (BAD_NULL_ERROR), column name" in by_id[2]
    assert "MySQL error 1406 (DATA_TOO_LONG), column name" in by_id[4]
    assert "MySQL error 4025 (CONSTRAINT_FAILED), constraint small_n" in by_id[5]
    assert "not sendable, column ratio: nan can not be used with MySQL" in by_id[6]
    assert "not sendable, column ratio: -inf can not be used with MySQL" in by_id[9]
    assert "MySQL error 1062 (DUP_ENTRY), constraint PRIMARY" in by_id[1]
    assert all(reason.startswith("T refused the record: ") for reason in by_id.values())
    columns_of = _sql(mariadb_db, "SHOW COLUMNS FROM strict_jvm_dl")
    assert [c[0] for c in columns_of] == [*DEAD_LETTER_COLUMNS, "recorded_at"]


def test_on_refused_record_fail_fails_the_task_naming_the_batch_and_leaves_nothing(
    spark: SparkSession, mariadb_db: MariaDbDatabase
) -> None:
    _sql(mariadb_db, REFUSING_DDL.format("strict_jvm"))
    store = MySqlPreparedTransactions(mariadb_db.dsn, busy_retry_seconds=10.0)
    store.ensure_schema()
    frame = spark.createDataFrame(REFUSED_ROWS[:3], REFUSING_SCHEMA).coalesce(1)
    columns = ["id", "name", "n", "ratio"]
    writer = MySqlWriter(dsn=mariadb_db.dsn, table="strict_jvm", columns=tuple(columns))

    with pytest.raises(Exception) as failed:
        _jvm(spark, writer).run(frame, _task(writer, two_phase=True), columns)

    assert (
        "batch 5: strict_jvm refused a record and no dead-letter table or refusal callback "
        "takes it: MySQL error 1048 (BAD_NULL_ERROR), column name: Column 'name' cannot be null"
    ) in str(failed.value)
    assert _sql(mariadb_db, "SELECT count(*) FROM strict_jvm") == [(0,)]
    assert store.in_doubt("") == []  # the branch was rolled back, not left prepared


def test_the_batchs_dead_letters_land_in_the_branch_as_the_python_writer_writes_them(
    spark: SparkSession, mariadb_db: MariaDbDatabase
) -> None:
    for table in ("ids_jvm", "ids_py"):
        _sql(mariadb_db, f"CREATE TABLE {table} (id BIGINT)")
    frame = dead_letter_frame(spark)
    columns = ["id", DL_RAW, DL_REASON]
    found = {}
    for path in ("jvm", "py"):
        writer = MySqlWriter(dsn=mariadb_db.dsn, table=f"ids_{path}", columns=("id",))
        dead = MySqlWriter(dsn=mariadb_db.dsn, table=f"dl_{path}", columns=DEAD_LETTER_COLUMNS)
        task = _task(writer, two_phase=False, dead=dead)
        if path == "jvm":
            results = _jvm(spark, writer).run(frame, task, columns)
        else:
            results = _python(frame, task, columns)
        assert results is not None and [r[2:] for r in results] == [(2, 2)]
        found[path] = (
            _sql(mariadb_db, f"SELECT id FROM ids_{path} ORDER BY id"),
            _letters(mariadb_db, f"dl_{path}", f"ids_{path}"),
        )
    assert found["jvm"] == found["py"]
    assert found["jvm"][0] == [(1,), (3,)]
    assert [letter[2:] for letter in found["jvm"][1]] == [
        ("", "reason only"),
        ("raw\\u0000with nul\tand tab\\ and\nnewline", "does not parse"),
    ]


def test_an_upsert_keeps_the_rows_the_python_writer_keeps_and_counts_the_keys(
    spark: SparkSession, mariadb_db: MariaDbDatabase
) -> None:
    for table in ("latest_jvm", "latest_py"):
        _sql(
            mariadb_db,
            f"CREATE TABLE {table} (k VARCHAR(8) PRIMARY KEY, v VARCHAR(16), version BIGINT)",
        )
        _sql(mariadb_db, f"INSERT INTO {table} VALUES ('c', 'stored', 9), ('d', 'stored', NULL)")
    rows = [
        ("b", "b-first", 5),
        ("a", "a-null", None),
        ("b", "b-older", 4),
        ("a", "a-one", 1),
        ("c", "c-older", 8),  # the stored 9 stays
        ("b", "b-tie-later", 5),
        ("d", "d-any", None),  # a stored NULL version is replaced by any row
    ]
    frame = spark.createDataFrame(rows, "k STRING, v STRING, version BIGINT").coalesce(1)
    columns = ["k", "v", "version"]
    counts = {}
    for path in ("jvm", "py"):
        writer = MySqlWriter(
            dsn=mariadb_db.dsn,
            table=f"latest_{path}",
            columns=tuple(columns),
            mode="upsert",
            key_columns=("k",),
            version_column="version",
        )
        task = _task(writer, two_phase=False)
        if path == "jvm":
            results = _jvm(spark, writer).run(frame, task, columns)
        else:
            results = _python(frame, task, columns)
        assert results is not None
        counts[path] = [r[2:] for r in results]

    assert counts["jvm"] == counts["py"] == [(4, 0)]
    stored = _sql(mariadb_db, "SELECT * FROM latest_jvm ORDER BY k")
    assert stored == _sql(mariadb_db, "SELECT * FROM latest_py ORDER BY k")
    assert stored == [
        ("a", "a-one", 1),
        ("b", "b-tie-later", 5),
        ("c", "stored", 9),
        ("d", "d-any", None),
    ]


def test_a_column_the_tasks_do_not_write_leaves_the_batch_to_the_python_writer(
    spark: SparkSession, mariadb_db: MariaDbDatabase, capsys: pytest.CaptureFixture[str]
) -> None:
    _sql(mariadb_db, "CREATE TABLE arrays (id BIGINT, tags TEXT)")
    writer = MySqlWriter(dsn=mariadb_db.dsn, table="arrays", columns=("id", "tags"))
    frame = spark.sql("SELECT CAST(1 AS BIGINT) AS id, array('a') AS tags")

    assert _jvm(spark, writer).run(frame, _task(writer, two_phase=False), ["id", "tags"]) is None

    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["event"], e["path"]) for e in events] == [("writer", "python")]
    assert events[0]["reason"] == "column tags: Spark array<string> has no MySQL literal here"
    assert _sql(mariadb_db, "SELECT count(*) FROM arrays") == [(0,)]
