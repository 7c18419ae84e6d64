"""eo's JVM writer tasks against a real Spark and a real PostgreSQL: what lands, and when not."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import replace
from decimal import Context, Decimal
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession
from tests.support.postgres import PREPARED_HERE
from tests.support.spark import dead_letter_frame, writer_session
from tests.support.writer_tasks import kinds_task

from eo_jobs.protocol.control import ensure_schema
from eo_jobs.protocol.gid import Gid
from eo_jobs.runtime.arrow_writer import ArrowWriteJob, arrow_task_writer
from eo_jobs.runtime.jvm_writer import JvmWriter, jvm_ready
from eo_jobs.runtime.task import WriterTask
from eo_jobs.sinks.postgres import jvm as postgres_jvm
from eo_jobs.sinks.postgres.arrow_copy import DL_RAW, DL_REASON
from eo_jobs.sinks.postgres.jvm import JdbcTarget, jdbc_target
from eo_jobs.sinks.postgres.kept import KEPT_MEMORY_BYTES
from eo_jobs.sinks.postgres.writer import PostgresWriter

pytestmark = pytest.mark.spark

COLUMNS = ("big", "small", "whole", "flag", "ratio", "fraction", "note", "at", "wall", "ntz", "day")
TABLE_DDL = (
    "CREATE TABLE public.kinds (big bigint, small smallint, whole integer, flag boolean, "
    "ratio double precision, fraction real, note text, at timestamptz, wall timestamp, "
    "ntz timestamp, day date)"
)
ROWS_SQL = """
SELECT * FROM VALUES
  (CAST(9223372036854775807 AS BIGINT), CAST(-32768 AS SMALLINT), CAST(2147483647 AS INT), true,
   CAST('NaN' AS DOUBLE), CAST(1.5 AS FLOAT), 'tab\there, new\nline, back\\\\slash, "quote", é €',
   TIMESTAMP '2026-03-29 01:30:00.123456', TIMESTAMP '1969-12-31 23:59:59.999999',
   TIMESTAMP_NTZ '2026-10-25 02:30:00', DATE '1999-12-31'),
  (CAST(-1 AS BIGINT), CAST(0 AS SMALLINT), CAST(-7 AS INT), false,
   CAST('-Infinity' AS DOUBLE), CAST(-0.25 AS FLOAT), '',
   TIMESTAMP '2000-01-01 00:00:00', TIMESTAMP '2000-01-01 00:00:00',
   TIMESTAMP_NTZ '1900-01-01 00:00:00', DATE '2000-01-01'),
  (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)
AS t(big, small, whole, flag, ratio, fraction, note, at, wall, ntz, day)
"""


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with writer_session("eo-jvm-writer-test") as session:
        yield session


_task = partial(kinds_task, query_id="6f1c9a8e-0000-4000-8000-000000000001")


def _ids(dsn: str, *, markers: bool) -> PostgresWriter:
    """Table ``public.ids (id bigint)`` (and eo's schema, for markers) and its writer."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.ids (id bigint)")
        if markers:
            ensure_schema(conn)
    return PostgresWriter(dsn=dsn, table="public.ids", columns=("id",))


def _jvm(writer: PostgresWriter) -> JvmWriter:
    chosen = JvmWriter.choose(writer, None)
    assert isinstance(chosen, JvmWriter), chosen
    return chosen


def _rows(dsn: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query).fetchall()


def test_the_session_can_run_the_jvm_writer(spark: SparkSession) -> None:
    assert jvm_ready(spark) is None


def test_every_kind_lands_value_for_value_as_the_python_writer_stores_it(
    spark: SparkSession, pg_dsn: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(TABLE_DDL)
        conn.execute("CREATE TABLE public.kinds_py (LIKE public.kinds)")
        name = conn.execute("SELECT current_database()").fetchone()
        assert name is not None  # a zone of the server's that is not UTC: the writers pin UTC
        conn.execute(
            sql.SQL("ALTER DATABASE {} SET TimeZone = 'America/Sao_Paulo'").format(
                sql.Identifier(name[0])
            )
        )
    frame = spark.sql(ROWS_SQL).coalesce(1)
    jvm = PostgresWriter(dsn=pg_dsn, table="public.kinds", columns=COLUMNS)
    python = PostgresWriter(dsn=pg_dsn, table="public.kinds_py", columns=COLUMNS)

    results = _jvm(jvm).run(frame, _task(jvm, two_phase=False), list(COLUMNS))
    ArrowWriteJob(arrow_task_writer(_task(python, two_phase=False))).run(frame, COLUMNS, 5)

    assert results is not None and [r[2] for r in results] == [3]
    assert _rows(pg_dsn, "SELECT * FROM kinds EXCEPT ALL SELECT * FROM kinds_py") == []
    assert _rows(pg_dsn, "SELECT * FROM kinds_py EXCEPT ALL SELECT * FROM kinds") == []
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        first = conn.execute(
            "SELECT big, note, at::text, wall::text, ntz::text, day::text, ratio::text "
            "FROM kinds WHERE flag"
        ).fetchone()
    assert first == (
        9223372036854775807,
        'tab\there, new\nline, back\\slash, "quote", é €',
        "2026-03-29 01:30:00.123456+00",
        "1969-12-31 23:59:59.999999",
        "2026-10-25 02:30:00",
        "1999-12-31",
        "NaN",
    )
    assert _rows(pg_dsn, "SELECT count(*) FROM kinds WHERE big IS NULL AND note IS NULL") == [(1,)]
    assert _rows(pg_dsn, "SELECT count(*) FROM kinds WHERE note = ''") == [(1,)]


def test_each_task_prepares_its_participant_under_its_gid_with_its_marker(
    spark: SparkSession, pg_dsn: str
) -> None:
    writer = _ids(pg_dsn, markers=True)
    task = _task(writer, two_phase=True)

    results = _jvm(writer).run(spark.range(0, 1000, numPartitions=2), task, ["id"])

    assert results is not None and sorted(r[2] for r in results) == [500, 500]
    gids = sorted(r[1] for r in results)
    parsed = [Gid.parse(g) for g in gids]
    assert [(p.epoch, p.batch, p.task) for p in parsed if p] == [(3, 5, 0), (3, 5, 1)]
    assert [g[: -len(g.split(":")[-1])] for g in gids] == [task.gid(0, 0)[:-1], task.gid(1, 0)[:-1]]
    prepared = _rows(pg_dsn, PREPARED_HERE + " ORDER BY gid")
    assert [g for (g,) in prepared] == gids
    assert _rows(pg_dsn, "SELECT count(*) FROM ids") == [(0,)]  # invisible until decided
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for gid in gids:
            conn.execute(f"COMMIT PREPARED '{gid}'")
    assert _rows(pg_dsn, "SELECT count(*), count(DISTINCT id) FROM ids") == [(1000, 1000)]
    markers = _rows(pg_dsn, "SELECT gid, pipeline, batch_id, rows_written FROM eo.markers")
    assert sorted(markers) == [(g, "test/kinds", 5, 500) for g in gids]


def test_dead_letters_land_in_the_same_transaction_and_another_sink_drops_them(
    spark: SparkSession, pg_dsn: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.ids (id bigint)")
        conn.execute("CREATE TABLE public.other (id bigint)")
        conn.execute(
            "CREATE TABLE public.dead (pipeline text, batch_id bigint, raw text, reason text)"
        )
    writer = PostgresWriter(dsn=pg_dsn, table="public.ids", columns=("id",))
    other = PostgresWriter(dsn=pg_dsn, table="public.other", columns=("id",))
    dead = PostgresWriter(
        dsn=pg_dsn, table="public.dead", columns=("pipeline", "batch_id", "raw", "reason")
    )
    frame = dead_letter_frame(spark)
    columns = ["id", DL_RAW, DL_REASON]

    first = _jvm(writer).run(frame, _task(writer, two_phase=False, dead=dead), columns)
    second = _jvm(other).run(frame, _task(other, two_phase=False), columns)

    assert first is not None and [r[2:] for r in first] == [(2, 2)]
    assert second is not None and [r[2:] for r in second] == [(2, 0)]
    assert _rows(pg_dsn, "SELECT id FROM ids ORDER BY id") == [(1,), (3,)]
    assert _rows(pg_dsn, "SELECT id FROM other ORDER BY id") == [(1,), (3,)]
    assert _rows(pg_dsn, "SELECT pipeline, batch_id, raw, reason FROM dead ORDER BY reason") == [
        ("test/kinds", 5, "raw\\u0000with nul\tand tab\\ and\nnewline", "does not parse"),
        ("test/kinds", 5, "", "reason only"),
    ]


def test_a_column_without_a_binary_form_leaves_the_batch_to_the_python_writer(
    spark: SparkSession, pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.money (id bigint, amount text)")
    writer = PostgresWriter(dsn=pg_dsn, table="public.money", columns=("id", "amount"))
    frame = spark.sql("SELECT CAST(1 AS BIGINT) AS id, CAST(2.50 AS DECIMAL(12, 2)) AS amount")

    assert _jvm(writer).run(frame, _task(writer, two_phase=False), ["id", "amount"]) is None

    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["event"], e["path"]) for e in events] == [("writer", "python")]
    assert "amount" in events[0]["reason"] and "decimal(12,2) into text" in events[0]["reason"]
    assert _rows(pg_dsn, "SELECT count(*) FROM money") == [(0,)]


TWELVE = Decimal("1e-12")
WIDE = Context(prec=50)
NUMERICS = (
    "0",
    "0.00",
    "-0.01",
    "1.5",
    "10000",
    "99990000",
    "123456789.0001",
    "-1000000000000.5000",
    "99999999999999999999999999.999999999999",
    "-0.000000000001",
    "0.000100000000",
)


def test_decimals_land_in_numeric_digit_for_digit_as_the_python_writer_stores_them(
    spark: SparkSession, pg_dsn: str
) -> None:
    """Base-10000 digit groups, weights below and above the point, trailing zeros kept by the
    display scale; a refused row's JSON carries the value read back from its binary form."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE public.amounts (n bigint, wide numeric, cents numeric(14, 2) "
            "CHECK (cents <> 0.25))"
        )
        conn.execute("CREATE TABLE public.amounts_py (n bigint, wide numeric, cents numeric)")
        conn.execute(DEAD_DDL)
    columns = ("n", "wide", "cents")
    values = ", ".join(
        f"({i}, CAST('{v}' AS DECIMAL(38, 12)), CAST({i} * 0.25 - 1 AS DECIMAL(14, 2)))"
        for i, v in enumerate(NUMERICS)
    )
    frame = spark.sql(
        f"SELECT CAST(n AS BIGINT) n, wide, cents FROM VALUES {values} AS t(n, wide, cents)"
    ).coalesce(1)

    def writer(table: str) -> PostgresWriter:
        return PostgresWriter(dsn=pg_dsn, table=f"public.{table}", columns=columns)

    jvm = _jvm(writer("amounts"))
    results = jvm.run(frame, _refusing(jvm.writer), list(columns))
    ArrowWriteJob(arrow_task_writer(_task(writer("amounts_py"), two_phase=False))).run(
        frame, columns, 5
    )

    assert results is not None and [(r[2], r[3]) for r in results] == [(len(NUMERICS) - 1, 1)]
    query = "SELECT n, wide::text, cents::text FROM {} WHERE n <> 5 ORDER BY n"
    stored = _rows(pg_dsn, query.format("amounts"))
    expected = [
        (i, format(Decimal(v).quantize(TWELVE, context=WIDE), "f"), f"{i * 0.25 - 1:.2f}")
        for i, v in enumerate(NUMERICS)
        if i != 5  # 5 * 0.25 - 1 = 0.25: refused by the CHECK
    ]
    assert stored == expected
    assert _rows(pg_dsn, query.format("amounts_py")) == expected
    assert _rows(pg_dsn, "SELECT raw FROM dead") == [
        ('{"n": 5, "wide": 99990000.000000000000, "cents": 0.25}',)
    ]


def test_a_target_column_changed_after_the_driver_read_its_type_fails_the_task_naming_it(
    spark: SparkSession, pg_dsn: str
) -> None:
    writer = _ids(pg_dsn, markers=False)
    jvm = _jvm(writer)
    assert jvm.run(spark.range(0, 3, numPartitions=1), _task(writer, two_phase=False), ["id"])
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE public.ids ALTER COLUMN id TYPE integer")

    with pytest.raises(Exception, match=r"column id of .* is of type int4 now"):
        jvm.run(spark.range(0, 3, numPartitions=1), _task(writer, two_phase=False), ["id"])

    assert _rows(pg_dsn, "SELECT count(*) FROM ids") == [(3,)]


def test_the_after_some_prepared_fault_fails_the_first_task_after_its_prepare(
    spark: SparkSession, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = _ids(pg_dsn, markers=True)
    monkeypatch.setenv("EO_FAULT_POINT", "after-some-prepared")
    monkeypatch.setenv("EO_FAULT_BATCH", "5")
    monkeypatch.setenv("EO_FAULT_ACTION", "raise")

    with pytest.raises(Exception, match="fault injected at after-some-prepared of batch 5"):
        _jvm(writer).run(spark.range(0, 10, numPartitions=1), _task(writer, two_phase=True), ["id"])

    prepared = _rows(pg_dsn, PREPARED_HERE)
    assert len(prepared) == 1  # prepared before the fault: the failed-attempt sweep's to undo
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"ROLLBACK PREPARED '{prepared[0][0]}'")


UPSERT_BATCHES = (
    # (id, balance, version): duplicate keys in a batch, NULL versions, equal versions.
    "(1, 10, 1), (1, 11, 2), (2, 20, NULL), (3, 30, 5), (3, 31, 5), (4, 40, 1)",
    "(1, 12, 1), (2, 21, 1), (3, 32, 5), (4, 41, NULL), (5, 50, NULL), (5, 51, NULL)",
)


def _twin_tables(dsn: str, ddl: str, seed: str) -> None:
    """``public.NAME`` and ``public.NAME_py`` (``ddl`` formatted with each name), both holding
    ``seed``, for the JVM and the Python writer to end alike; and eo's schema for the stages."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in ("", "_py"):
            conn.execute(ddl.format(table))
            conn.execute(seed.format(table))
        ensure_schema(conn)  # the staging tables live in schema eo


def _through_both_writers(
    spark: SparkSession, make: Any, queries: list[str], columns: tuple[str, ...]
) -> list[int]:
    """Each query's rows written by the JVM writer into ``make("")``'s table and by the Python
    writer into ``make("_py")``'s; the JVM writer's row count of each batch."""
    jvm = _jvm(make(""))
    counts = []
    for query in queries:
        frame = spark.sql(query).coalesce(1)
        results = jvm.run(frame, _task(jvm.writer, two_phase=False), list(columns))
        assert results is not None
        counts.append(results[0][2])
        python = make("_py")
        ArrowWriteJob(arrow_task_writer(_task(python, two_phase=False))).run(frame, columns, 5)
    return counts


def test_an_upsert_ends_as_the_python_writer_s_and_counts_the_rows_it_merged(
    spark: SparkSession, pg_dsn: str
) -> None:
    _twin_tables(
        pg_dsn,
        "CREATE TABLE public.accounts{} (id bigint PRIMARY KEY, balance bigint, version bigint)",
        "INSERT INTO public.accounts{} VALUES (4, 39, 0), (6, 60, 9)",
    )
    columns = ("id", "balance", "version")

    def upsert(suffix: str) -> PostgresWriter:
        return PostgresWriter(
            dsn=pg_dsn,
            table=f"public.accounts{suffix}",
            columns=columns,
            mode="upsert",
            key_columns=("id",),
            version_column="version",
        )

    merged = _through_both_writers(
        spark,
        upsert,
        [
            "SELECT CAST(id AS BIGINT) id, CAST(balance AS BIGINT) balance, "
            f"CAST(version AS BIGINT) version FROM VALUES {values} AS t(id, balance, version)"
            for values in UPSERT_BATCHES
        ],
        columns,
    )

    table = _rows(pg_dsn, "SELECT * FROM accounts ORDER BY id")
    assert table == _rows(pg_dsn, "SELECT * FROM accounts_py ORDER BY id")
    assert table == [(1, 11, 2), (2, 21, 1), (3, 32, 5), (4, 40, 1), (5, 51, None), (6, 60, 9)]
    # Keys merged: 1-4; then 2, 3 and 5 (1 and 4 kept by the version guard are not counted).
    assert merged == [4, 3]
    assert _rows(pg_dsn, "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'stage%'") == [(0,)]


def test_accumulate_adds_as_the_python_writer_does_and_counts_the_keys_it_wrote(
    spark: SparkSession, pg_dsn: str
) -> None:
    _twin_tables(
        pg_dsn,
        "CREATE TABLE public.sums{} (id bigint PRIMARY KEY, cents numeric(20,0), n bigint)",
        "INSERT INTO public.sums{} VALUES (4, 39, 1), (6, NULL, 2)",
    )
    columns = ("id", "cents", "n")

    def accumulate(suffix: str) -> PostgresWriter:
        return PostgresWriter(
            dsn=pg_dsn,
            table=f"public.sums{suffix}",
            columns=columns,
            mode="accumulate",
            key_columns=("id",),
            add_columns=("cents", "n"),
        )

    written = _through_both_writers(
        spark,
        accumulate,
        [
            "SELECT CAST(id AS BIGINT) id, CAST(cents AS DECIMAL(20,0)) cents, "
            f"CAST(1 AS BIGINT) n FROM VALUES {values} AS t(id, cents)"
            for values in ("(1, 10), (1, 11), (4, 1), (6, 5)", "(1, 9000000000000000000), (2, 2)")
        ],
        columns,
    )

    table = _rows(pg_dsn, "SELECT id, cents::text, n FROM sums ORDER BY id")
    assert table == _rows(pg_dsn, "SELECT id, cents::text, n FROM sums_py ORDER BY id")
    assert table == [
        (1, "9000000000000000021", 3),
        (2, "2", 1),
        (4, "40", 2),
        (6, "5", 3),  # a stored NULL counts as 0
    ]
    assert written == [3, 2]  # keys written, not rows


def test_jvm_readiness_decides_before_anything_else() -> None:
    writer = PostgresWriter(dsn="postgresql://u@db:5432/d", table="public.t", columns=("k",))

    assert JvmWriter.choose(writer, "not built") == "not built"
    assert isinstance(JvmWriter.choose(writer, None), JvmWriter)


@pytest.fixture
def libpq_free_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in list(os.environ):
        if name.startswith("PG"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


@pytest.mark.usefixtures("libpq_free_env")
def test_a_tcp_dsn_is_said_to_pgjdbc_with_the_same_meaning() -> None:
    target = jdbc_target(
        "host=db.example port=6432 dbname='my db' user=eo password=s3cr=t sslmode=verify-full "
        "sslrootcert=/etc/ca.pem connect_timeout=4 keepalives_idle=30"
    )

    assert target == JdbcTarget(
        "jdbc:postgresql://db.example:6432/my%20db",
        {
            "user": "eo",
            "password": "s3cr=t",
            "sslmode": "verify-full",
            "sslrootcert": "/etc/ca.pem",
            "connectTimeout": "4",
            "socketTimeout": "120",
            "tcpKeepAlive": "true",
            "ApplicationName": "eo-writer",
        },
    )
    url = jdbc_target("postgresql://eo@[::1]:5433/ledger")
    assert isinstance(url, JdbcTarget) and url.url == "jdbc:postgresql://[::1]:5433/ledger"
    assert url.properties["sslmode"] == "prefer" and "password" not in url.properties


@pytest.mark.usefixtures("libpq_free_env")
@pytest.mark.parametrize(
    ("dsn", "reason"),
    [
        ("host=/var/run/postgresql dbname=d", "not one TCP host"),
        ("dbname=d", "not one TCP host"),
        ("host=a,b dbname=d", "not one TCP host"),
        ("service=ledger", "sets service"),
        ("host=db sslcert=/c.pem sslkey=/k.pem", "sets sslcert, sslkey"),
        ("host=db target_session_attrs=read-write", "sets target_session_attrs"),
        ("host=db port=5432,5433", "not one port"),
    ],
)
def test_a_dsn_pgjdbc_would_read_otherwise_keeps_the_python_writer(dsn: str, reason: str) -> None:
    target = jdbc_target(dsn)

    assert isinstance(target, str) and reason in target


def test_libpq_environment_and_a_password_file_keep_the_python_writer(
    libpq_free_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert isinstance(jdbc_target("host=db user=eo"), JdbcTarget)
    (libpq_free_env / ".pgpass").write_text("db:5432:*:eo:secret\n")
    assert jdbc_target("host=db user=eo") == (
        "the password would come from ~/.pgpass, which pgJDBC does not read"
    )
    assert isinstance(jdbc_target("host=db user=eo password=given"), JdbcTarget)
    monkeypatch.setenv("PGSSLMODE", "require")
    assert jdbc_target("host=db user=eo password=given") == (
        "libpq reads PGSSLMODE from the environment; pgJDBC would not"
    )


def test_an_upsert_target_with_columns_it_does_not_write_takes_their_defaults(
    spark: SparkSession, pg_dsn: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE public.accounts (id bigserial PRIMARY KEY, account text UNIQUE, "
            "balance bigint, updated_at timestamptz NOT NULL DEFAULT now())"
        )
        ensure_schema(conn)
    writer = PostgresWriter(
        dsn=pg_dsn,
        table="public.accounts",
        columns=("account", "balance"),
        mode="upsert",
        key_columns=("account",),
    )
    frame = spark.sql(
        "SELECT account, CAST(balance AS BIGINT) balance "
        "FROM VALUES ('a', 1), ('b', 2) AS t(account, balance)"
    ).coalesce(1)

    results = _jvm(writer).run(frame, _task(writer, two_phase=False), ["account", "balance"])

    assert results is not None and [r[2] for r in results] == [2]
    assert _rows(
        pg_dsn, "SELECT account, balance, updated_at IS NOT NULL FROM accounts ORDER BY account"
    ) == [("a", 1, True), ("b", 2, True)]


DEAD_DDL = "CREATE TABLE public.dead (pipeline text, batch_id bigint, raw text, reason text)"


def _refusing(
    writer: PostgresWriter, *, two_phase: bool = False, kept: int = KEPT_MEMORY_BYTES
) -> WriterTask:
    return replace(
        _task(writer, two_phase=two_phase), refused_table="public.dead", kept_memory_bytes=kept
    )


@pytest.mark.parametrize(
    "kept",
    [KEPT_MEMORY_BYTES, 3 << 19],
    ids=["kept-in-memory", "kept-past-1.5MiB-in-a-file"],
)
def test_refused_rows_of_a_task_of_several_flushes_are_dead_letters_and_the_rest_lands(
    spark: SparkSession, pg_dsn: str, kept: int
) -> None:
    """With 1.5 MiB kept in memory, the JVM's second and third segments (refused id 123456 in
    the second) and the Python writer's last Arrow batch are read back from the file."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for table in ("ids", "ids_py"):
            conn.execute(f"CREATE TABLE public.{table} (id bigint CHECK (id NOT IN (7, 123456)))")
        conn.execute(DEAD_DDL)
        ensure_schema(conn)
    frame = spark.range(0, 200_000, numPartitions=1)  # ~2.8 MB of binary COPY: 3 flushes
    jvm = PostgresWriter(dsn=pg_dsn, table="public.ids", columns=("id",))
    python = PostgresWriter(dsn=pg_dsn, table="public.ids_py", columns=("id",))

    results = _jvm(jvm).run(frame, _refusing(jvm, two_phase=True, kept=kept), ["id"])
    py_results = ArrowWriteJob(arrow_task_writer(_refusing(python, two_phase=True, kept=kept))).run(
        frame, ["id"], 5
    )

    assert results is not None and [r[2:] for r in results] == [(199_998, 2)]
    assert [r[2:] for r in py_results] == [(199_998, 2)]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for (gid,) in conn.execute(PREPARED_HERE).fetchall():
            conn.execute(f"COMMIT PREPARED '{gid}'")  # the dead letters were in the same one
    for table in ("ids", "ids_py"):
        assert _rows(pg_dsn, f"SELECT count(*), sum(id) FROM {table}") == [
            (199_998, sum(range(200_000)) - 7 - 123_456)
        ]
    dead = _rows(pg_dsn, "SELECT pipeline, batch_id, raw, reason FROM dead ORDER BY raw, reason")
    assert [(p, b, json.loads(r)) for p, b, r, _ in dead] == [
        ("test/kinds", 5, {"id": 123456}),
        ("test/kinds", 5, {"id": 123456}),
        ("test/kinds", 5, {"id": 7}),
        ("test/kinds", 5, {"id": 7}),
    ]
    reasons = {reason for *_, reason in dead}
    assert reasons == {
        f"public.{t} refused the record: SQLSTATE 23514, constraint {t}_id_check: new row for "
        f'relation "{t}" violates check constraint "{t}_id_check" (Failing row contains ({i}).)'
        for t in ("ids", "ids_py")
        for i in (7, 123456)
    }


def test_an_instant_near_sparks_earliest_is_refused_not_wrapped_into_the_far_future(
    spark: SparkSession, pg_dsn: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.events (id bigint, at timestamptz)")
    writer = PostgresWriter(dsn=pg_dsn, table="public.events", columns=("id", "at"))
    frame = spark.sql(
        "SELECT CAST(id AS BIGINT) id, timestamp_micros(micros) at FROM VALUES "
        "(1, 0L), (2, -9223372036854775000L) AS t(id, micros)"
    ).coalesce(1)

    # onRefusedRecord: fail, so the refusal itself shows (a dead letter is the default).
    with pytest.raises(Exception, match="SQLSTATE 22008, column at: timestamp out of range"):
        _jvm(writer).run(frame, _task(writer, two_phase=False), ["id", "at"])

    assert _rows(pg_dsn, "SELECT count(*) FROM events") == [(0,)]


def test_a_written_column_dropped_after_the_driver_read_its_type_fails_the_task_naming_it(
    spark: SparkSession, pg_dsn: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.pairs (id bigint, note text)")
    writer = PostgresWriter(dsn=pg_dsn, table="public.pairs", columns=("id", "note"))
    jvm = _jvm(writer)
    frame = spark.sql("SELECT CAST(1 AS BIGINT) id, 'a' note").coalesce(1)
    assert jvm.run(frame, _task(writer, two_phase=False), ["id", "note"])
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE public.pairs DROP COLUMN note")

    with pytest.raises(Exception, match=r"column note of .* is gone"):
        jvm.run(frame, _task(writer, two_phase=False), ["id", "note"])


@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_a_write_that_outlasts_the_socket_timeout_still_lands(
    spark: SparkSession, pg_dsn: str, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setattr(postgres_jvm, "SOCKET_TIMEOUT_SECONDS", 2)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.slow (id bigint PRIMARY KEY)")
        conn.execute(
            "CREATE FUNCTION public.nap() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN PERFORM pg_sleep(3); RETURN NULL; END $$"
        )
        conn.execute(
            "CREATE TRIGGER nap AFTER INSERT ON public.slow "
            "FOR EACH STATEMENT EXECUTE FUNCTION public.nap()"
        )
        ensure_schema(conn)
    upsert = {"mode": "upsert", "key_columns": ("id",)} if mode == "upsert" else {}
    writer = PostgresWriter(dsn=pg_dsn, table="public.slow", columns=("id",), **upsert)  # type: ignore[arg-type]

    results = _jvm(writer).run(
        spark.range(0, 10, numPartitions=1), _task(writer, two_phase=False), ["id"]
    )

    assert results is not None and [r[2] for r in results] == [10]
    assert _rows(pg_dsn, "SELECT count(*) FROM slow") == [(10,)]


def test_an_upsert_whose_newest_row_is_refused_keeps_the_row_before_it(
    spark: SparkSession, pg_dsn: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for table in ("accounts", "accounts_py"):
            conn.execute(
                f"CREATE TABLE public.{table} (id bigint PRIMARY KEY, "
                "balance bigint CHECK (balance >= 0), version bigint)"
            )
        conn.execute(DEAD_DDL)
        ensure_schema(conn)
    columns = ("id", "balance", "version")
    # Key 1's newest version is refused: the batch is as if it had never come, so version 1
    # lands (the merge of the whole batch would have picked version 2 and been refused).
    frame = spark.sql(
        "SELECT CAST(id AS BIGINT) id, CAST(balance AS BIGINT) balance, "
        "CAST(version AS BIGINT) version FROM VALUES "
        "(1, 10, 1), (2, 20, 1), (1, -1, 2), (3, 30, 1) AS t(id, balance, version)"
    ).coalesce(1)

    def upsert(table: str) -> PostgresWriter:
        return PostgresWriter(
            dsn=pg_dsn,
            table=f"public.{table}",
            columns=columns,
            mode="upsert",
            key_columns=("id",),
            version_column="version",
        )

    jvm = upsert("accounts")
    results = _jvm(jvm).run(frame, _refusing(jvm), list(columns))
    py_results = ArrowWriteJob(arrow_task_writer(_refusing(upsert("accounts_py")))).run(
        frame, columns, 5
    )

    assert results is not None and [r[2:] for r in results] == [(3, 1)]
    assert [r[2:] for r in py_results] == [(3, 1)]
    for table in ("accounts", "accounts_py"):
        assert _rows(pg_dsn, f"SELECT * FROM {table} ORDER BY id") == [
            (1, 10, 1),
            (2, 20, 1),
            (3, 30, 1),
        ]
    dead = _rows(pg_dsn, "SELECT raw, reason FROM dead ORDER BY reason")
    assert [json.loads(raw) for raw, _ in dead] == [{"id": 1, "balance": -1, "version": 2}] * 2
    assert [reason.split(":")[0] for _, reason in dead] == [
        "public.accounts refused the record",
        "public.accounts_py refused the record",
    ]
    assert _rows(pg_dsn, "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'stage%'") == [(0,)]
