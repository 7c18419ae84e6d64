"""The MySQL/MariaDB sink's part of eo's JVM writer (``sinks.jvm``).

Its tasks are ``dev.eo.writer.mysql``.

The JVM tasks write the branch the Python writer task writes (``MySqlKind.run_task``,
``MySqlWriter._branch``), from the same definitions, sent here in the spec: the session
(``SESSION_SQL`` with ``SQL_MODE`` and the writer's timeouts), the dead-letter table made before
the branch (``DEAD_LETTER_DDL``, ``EXISTS_SQL``), ``XA START`` of the xid of the task's gid
(``mysql_xa.xid_of``: the spec carries every part but the task's partition and attempt), the
rows as multi-row ``INSERT``s of the writer's ``insert_prefix``/``insert_suffix``,
``chunk_rows`` and ``statement_chars``, an upsert's one row per key (``upsert.winners``),
refused rows found by halving (``REFUSAL_CODES``) and written as dead letters in the branch,
the marker (``MARKER_SQL``), ``XA END``, ``XA PREPARE``; or ``BEGIN`` ... ``COMMIT`` at least
once. The values are literals meaning what the Python path's mean
(``dev.eo.writer.mysql.Literals``).

The tasks need MariaDB Connector/J (``org.mariadb.jdbc.Driver``) on Spark's class path:
``scripts/build-writer.sh`` puts its jar beside eo's, and the session puts both there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pymysql.converters

from eo_jobs.protocol.mysql_xa import CONNECT_TIMEOUT, MARKER_SQL, REOPEN_SECONDS, xid_of
from eo_jobs.sinks.mysql.dead_letters import DEAD_LETTER_DDL, EXISTS_SQL, INSERT_SQL, table_parts
from eo_jobs.sinks.mysql.identifiers import table_identifier
from eo_jobs.sinks.mysql.refusals import REFUSAL_CODES
from eo_jobs.sinks.mysql.writer import SESSION_SQL, SQL_MODE, MySqlWriter

if TYPE_CHECKING:
    from eo_jobs.sinks.table_writer import TableWriter, TaskWrite

DRIVER_CLASS = "org.mariadb.jdbc.Driver"
TASK_PART_BYTES = 16
"""The task's own part of a bqual: partition and attempt, 8 bytes each (``xid_of``)."""
DATABASE_TAG_BYTES = 4


def mysql_jvm_sink(writer: TableWriter) -> MySqlJvmSink | str:
    """The JVM writer's part for a MySQL writer (every DSN the Python writer takes is one)."""
    assert isinstance(writer, MySqlWriter)
    return MySqlJvmSink(writer)


def _literal(value: str) -> str:
    """A string literal as PyMySQL writes it (backslash escapes: the writer's session)."""
    return str(pymysql.converters.escape_item(value, "utf8mb4"))


@dataclass(frozen=True)
class MySqlJvmSink:
    """One MySQL/MariaDB sink's part of the JVM writer's spec (``sinks.jvm.JvmSink``)."""

    writer: MySqlWriter

    kind = "mysql"
    driver_class = DRIVER_CLASS

    def sink_spec(self) -> dict[str, Any]:
        """The table as dead letters and failures name it."""
        return {"tableName": self.writer.table, "reopenSeconds": REOPEN_SECONDS}

    def batch_spec(self, task: TaskWrite, columns: Sequence[str]) -> dict[str, Any]:
        """``Spec.mysql``: where, the session, the statements, the xid, the dead letters."""
        writer = self.writer
        target = writer.target
        xid = xid_of(task.gid(0, 0), target.database)
        tail = len(xid.bqual) - DATABASE_TAG_BYTES
        batch_dead = task.dead_letters
        refused_to = task.refused_letters()
        letters_at = next((w.table for w in (refused_to, batch_dead) if w is not None), None)
        index = {c: i for i, c in enumerate(columns)}
        upsert = writer.mode == "upsert"
        version = writer.version_column
        return {
            "mysql": {
                "host": target.host,
                "port": target.port,
                "user": target.user,
                "password": target.password,
                "database": target.database,
                "connectTimeoutSeconds": CONNECT_TIMEOUT,
                "sessionSql": SESSION_SQL,
                "sqlMode": SQL_MODE,
                "lockWaitTimeoutSeconds": writer.lock_wait_timeout_s,
                "sessionWaitTimeoutSeconds": writer.session_wait_timeout_s,
                "insertPrefix": writer.insert_prefix,
                "insertSuffix": writer.insert_suffix,
                "chunkRows": writer.chunk_rows,
                "statementChars": writer.statement_chars,
                "markerSql": MARKER_SQL,
                "gtrid": xid.gtrid.hex(),
                "bqualHead": xid.bqual[: tail - TASK_PART_BYTES].hex(),
                "bqualTail": xid.bqual[tail:].hex(),
                "formatId": xid.format_id,
                **_dead_letter_spec(letters_at),
                "batchDeadLetters": batch_dead is not None,
                "refusedToDeadLetters": refused_to is not None,
                "refusalCodes": {str(code): name for code, name in REFUSAL_CODES.items()},
                "keyIndexes": [index[k] for k in writer.key_columns] if upsert else [],
                "versionIndex": index[version] if upsert and version is not None else -1,
            }
        }


def _dead_letter_spec(table: str | None) -> dict[str, str | None]:
    """The dead-letter table the branch writes into (``dead_letters``), or none."""
    if table is None:
        return {
            "deadLetterTable": None,
            "deadLetterExistsSql": None,
            "deadLetterDdl": None,
            "deadLetterInsertPrefix": None,
        }
    quoted = table_identifier(table)
    insert = INSERT_SQL.format(quoted)
    return {
        "deadLetterTable": quoted,
        "deadLetterExistsSql": EXISTS_SQL % tuple(_literal(p) for p in table_parts(table)),
        "deadLetterDdl": DEAD_LETTER_DDL.format(quoted),
        "deadLetterInsertPrefix": insert[: insert.index("(%s")],
    }
