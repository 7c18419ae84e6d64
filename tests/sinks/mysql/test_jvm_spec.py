"""The MySQL sink's part of the JVM writer's spec (``sinks.mysql.jvm``), without a server: the
xid each task builds from its parts is ``xid_of`` of its gid, and the statements are the Python
writer's own."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from eo_jobs.protocol.gid import Gid
from eo_jobs.protocol.mysql_xa import MARKER_SQL, xid_of
from eo_jobs.sinks.kinds import kind_of
from eo_jobs.sinks.mysql.jvm import MySqlJvmSink
from eo_jobs.sinks.mysql.refusals import REFUSAL_CODES
from eo_jobs.sinks.mysql.writer import SESSION_SQL, SQL_MODE, MySqlWriter
from eo_jobs.sinks.table_writer import TableWriter

DSN = "mysql://eo:pw@db.example:3307/shop"


@dataclass(frozen=True)
class Task:
    """The ``TaskWrite`` a spec reads."""

    writer: TableWriter
    dead_letters: TableWriter | None = None
    refused_table: str | None = None
    pipeline: str = "shop/orders"
    batch_id: int = 41
    two_phase: bool = True
    kept_memory_bytes: int = 1 << 20

    def refused_letters(self) -> TableWriter | None:
        if self.refused_table is None:
            return None
        return kind_of(DSN).dead_letter_writer(DSN, self.refused_table)

    def gid(self, partition: int, attempt_id: int) -> str:
        return str(
            Gid.build(
                pipeline=self.pipeline,
                query_id="6f1c9a8e-0000-4000-8000-000000000003",
                sink="orders",
                epoch=7,
                batch=self.batch_id,
                task=partition,
                attempt=attempt_id,
            )
        )


def _writer(**kwargs: object) -> MySqlWriter:
    return MySqlWriter(dsn=DSN, table="shop.orders", columns=("id", "v", "version"), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("partition", "attempt"), [(0, 0), (3, 456), (2**31 - 1, 2**62)])
def test_a_tasks_xid_from_the_specs_parts_is_the_xid_of_its_gid(
    partition: int, attempt: int
) -> None:
    task = Task(_writer())
    my = MySqlJvmSink(task.writer).batch_spec(task, ["id", "v", "version"])["mysql"]

    bqual = bytes.fromhex(my["bqualHead"]) + partition.to_bytes(8, "big")
    bqual += attempt.to_bytes(8, "big") + bytes.fromhex(my["bqualTail"])
    expected = xid_of(task.gid(partition, attempt), "shop")
    assert (bytes.fromhex(my["gtrid"]), bqual, my["formatId"]) == (
        expected.gtrid,
        expected.bqual,
        expected.format_id,
    )


def test_the_statements_and_settings_are_the_python_writers_own() -> None:
    writer = _writer(mode="upsert", key_columns=("id",), version_column="version")
    task = Task(writer, refused_table="orders_dead_letter")

    my = MySqlJvmSink(writer).batch_spec(task, ["id", "v", "version", "_eo_raw"])["mysql"]

    assert (my["host"], my["port"], my["user"], my["password"], my["database"]) == (
        "db.example",
        3307,
        "eo",
        "pw",
        "shop",
    )
    assert (my["sessionSql"], my["sqlMode"], my["markerSql"]) == (SESSION_SQL, SQL_MODE, MARKER_SQL)
    assert my["insertPrefix"] == writer.insert_prefix
    assert (
        my["insertSuffix"] == writer.insert_suffix
        and "ON DUPLICATE KEY UPDATE" in my["insertSuffix"]
    )
    assert (my["chunkRows"], my["statementChars"]) == (writer.chunk_rows, writer.statement_chars)
    assert (my["keyIndexes"], my["versionIndex"]) == ([0], 2)
    assert my["refusalCodes"] == {str(k): v for k, v in REFUSAL_CODES.items()}
    assert my["deadLetterTable"] == "`orders_dead_letter`"
    assert my["deadLetterInsertPrefix"] == (
        "INSERT INTO `orders_dead_letter` (pipeline, batch_id, raw, reason) VALUES "
    )
    assert my["deadLetterExistsSql"].endswith(
        "TABLE_SCHEMA = COALESCE(NULLIF('', ''), DATABASE()) AND TABLE_NAME = 'orders_dead_letter'"
    )
    assert my["deadLetterDdl"].startswith("CREATE TABLE IF NOT EXISTS `orders_dead_letter` (")
    assert (my["refusedToDeadLetters"], my["batchDeadLetters"]) == (True, False)


def test_without_a_dead_letter_table_refused_rows_fail_the_task() -> None:
    writer = _writer()
    my = MySqlJvmSink(writer).batch_spec(Task(writer), ["id", "v", "version"])["mysql"]

    assert my["deadLetterTable"] is None and my["refusedToDeadLetters"] is False
    assert (my["keyIndexes"], my["versionIndex"]) == ([], -1)


def test_the_mysql_kind_gives_every_writer_to_the_jvm_writer() -> None:
    sink = kind_of(DSN).jvm_sink(_writer())

    assert isinstance(sink, MySqlJvmSink)
    assert (sink.kind, sink.driver_class) == ("mysql", "org.mariadb.jdbc.Driver")
