"""Writer tasks in the JVM: binary COPY from Spark's internal rows, no Python worker.

The Python writer (``arrow_writer``) hands each partition to a Python worker as Arrow record
batches, which pgpq encodes for ``COPY (FORMAT binary)``. On 200,000-row batches that
hand-over (Spark's Arrow conversion, the worker reading the socket, the encoding) was most of
what eo cost above Spark's own ``noop`` sink: a writer task that encodes the binary form in
the JVM, straight from Spark's rows, wrote 723k rows/s where the same task in Python wrote
539k (bench/README.md, 2026-11-27). ``jvm/writer`` is that task (``dev.eo.writer``), with the
same transaction as the Python task (``runtime.task``): TimeZone UTC and lock_timeout, the rows
(an upsert's through a staging table of the task's own, merged by ``PostgresWriter``'s
statements), the dead letters in the same transaction, the marker, PREPARE under the same gid,
and the same handling of records the table refuses (``sinks.postgres.refusals``).

It is used for a sink when everything it needs holds, else the sink keeps the Python writer
and the driver says why (event ``writer``):

- its jar was built (``scripts/build-writer.sh``, run by ``./dev setup``; the job image has it);
- the sink's DSN can be said to pgJDBC exactly (``jdbc_target``: one TCP host, no libpq
  environment variables or password file the JDBC driver would not read the same way);
- per batch, every written column has a binary form its target column's type reads as is
  (``dev.eo.writer.Kind``; a decimal, say, is not one): otherwise that batch goes through the
  Python writer, which falls back to CSV.

SQL is composed here by psycopg (identifiers quoted by the driver library), and values reach
the statements as bind parameters in the tasks.
"""

from __future__ import annotations

import functools
import getpass
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg import sql
from py4j.java_gateway import JavaClass  # type: ignore[import-untyped]
from pyspark.sql import DataFrame, SparkSession

from eo_jobs import logs
from eo_jobs.protocol.connection import REOPEN_SECONDS, connect_patiently, with_keepalives
from eo_jobs.protocol.faults import armed_action
from eo_jobs.protocol.xa import MARKER_SQL
from eo_jobs.runtime.packages import writer_jars
from eo_jobs.runtime.task import WriterTask
from eo_jobs.sinks.postgres.arrow_copy import COLUMN_TYPES_SQL, DL_RAW, DL_REASON, column_types
from eo_jobs.sinks.postgres.refusals import DEAD_LETTER_DDL
from eo_jobs.sinks.postgres.writer import SESSION_SQL, PostgresWriter, table_identifier
from eo_jobs.sinks.table_writer import TableWriter

ENTRY = "dev.eo.writer.PreparedCopy"
UNFIT = "unfit\t"
"""The first line of the writer's answer when the frame has a column it cannot carry."""
STAGE = "@@STAGE@@"
"""Stands for the suffix of an upsert task's staging table name (``dev.eo.writer.Spec.STAGE``)."""
SOCKET_TIMEOUT_SECONDS = 120
"""pgJDBC sets no TCP keepalive timing (the system's default notices a vanished peer after
two hours); a task that hears nothing from its server for this long fails instead. It waits
at most ``lock_timeout`` for a lock, so only a lost server goes quiet for this long, except in
the statements whose time grows with the rows (the end of a COPY, an upsert's merge), which
the tasks run without it (``TaskWriter.unbounded``): a big batch must not fail on every try."""
JDBC_PARAMETERS = frozenset(
    {
        "host",
        "port",
        "dbname",
        "user",
        "password",
        "sslmode",
        "sslrootcert",
        "application_name",
        "connect_timeout",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
    }
)
"""libpq parameters pgJDBC is given the same meaning of (keepalives: see the timeout above)."""
LIBPQ_ENVIRONMENT = (
    "PGHOST",
    "PGHOSTADDR",
    "PGPORT",
    "PGDATABASE",
    "PGUSER",
    "PGPASSWORD",
    "PGPASSFILE",
    "PGSERVICE",
    "PGSERVICEFILE",
    "PGOPTIONS",
    "PGSSLMODE",
    "PGSSLROOTCERT",
    "PGSSLCERT",
    "PGSSLKEY",
    "PGSSLCRL",
    "PGREQUIRESSL",
    "PGGSSENCMODE",
    "PGTARGETSESSIONATTRS",
    "PGCHANNELBINDING",
    "PGREQUIREAUTH",
)
"""Variables libpq reads to fill in a DSN; pgJDBC reads none of them."""


FORCE_ENV = "EO_WRITER"
"""``python`` keeps every sink on the Python writer (an A/B, or a way around a JVM writer bug)."""


def jvm_ready(spark: SparkSession) -> str | None:
    """None when the JVM writer can run in this session, else why not."""
    if os.environ.get(FORCE_ENV, "auto") == "python":
        return f"{FORCE_ENV}=python"
    jars = writer_jars()
    if isinstance(jars, str):
        return jars
    jvm: Any = spark._jvm
    if not isinstance(jvm.dev.eo.writer.PreparedCopy, JavaClass):
        return f"{ENTRY} is not on Spark's class path (spark.jars)"
    return None


@dataclass(frozen=True)
class JdbcTarget:
    """A sink's DSN as pgJDBC takes it."""

    url: str
    properties: dict[str, str]


def jdbc_target(dsn: str) -> JdbcTarget | str:
    """The DSN said to pgJDBC, or why it cannot be said exactly."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        return f"the DSN does not parse ({exc})"
    other = sorted(set(params) - JDBC_PARAMETERS)
    if other:
        return f"the DSN sets {', '.join(other)}, which pgJDBC does not take alike"
    environment = [name for name in LIBPQ_ENVIRONMENT if name in os.environ]
    if environment:
        return f"libpq reads {', '.join(environment)} from the environment; pgJDBC would not"
    host = str(params.get("host", ""))
    if not host or host.startswith("/") or host.startswith("@") or "," in host:
        return f"the DSN's host {host!r} is not one TCP host (pgJDBC has no Unix sockets)"
    port = str(params.get("port", "5432"))
    if not port.isdigit():
        return f"the DSN's port {port!r} is not one port"
    if "password" not in params and (Path.home() / ".pgpass").exists():
        return "the password would come from ~/.pgpass, which pgJDBC does not read"
    user = str(params.get("user") or getpass.getuser())
    dbname = str(params.get("dbname") or user)
    bracketed = f"[{host}]" if ":" in host else host
    properties = {
        "user": user,
        "sslmode": str(params.get("sslmode", "prefer")),
        "connectTimeout": str(params.get("connect_timeout", "10")),
        "socketTimeout": str(SOCKET_TIMEOUT_SECONDS),
        "tcpKeepAlive": "true",
        "ApplicationName": str(params.get("application_name", "eo-writer")),
    }
    if "password" in params:
        properties["password"] = str(params["password"])
    if "sslrootcert" in params:
        properties["sslrootcert"] = str(params["sslrootcert"])
    return JdbcTarget(f"jdbc:postgresql://{bracketed}:{port}/{quote(dbname, safe='')}", properties)


def _jdbc(statement: str) -> str:
    """A psycopg statement with JDBC's parameter markers."""
    return statement.replace("%s", "?")


@dataclass
class JvmWriter:
    """One sink's writer tasks in the JVM, for every batch of a driver's query."""

    writer: PostgresWriter
    target: JdbcTarget
    _types: dict[str, str] | None = field(default=None, init=False)
    _refused: set[str] = field(default_factory=set, init=False)

    @classmethod
    def choose(cls, writer: TableWriter, jvm_ready: str | None) -> JvmWriter | str:
        """The JVM writer for ``writer``'s sink, or why the sink keeps the Python writer.

        ``jvm_ready`` is None when the writer's jar is on Spark's class path, else why not.
        """
        if not isinstance(writer, PostgresWriter):
            return f"the JVM writer writes PostgreSQL only; {type(writer).__name__} is Python's"
        if jvm_ready is not None:
            return jvm_ready
        target = jdbc_target(writer.dsn)
        if isinstance(target, str):
            return target
        return cls(writer, target)

    def run(
        self, frame: DataFrame, task: WriterTask, columns: list[str]
    ) -> list[tuple[str, str, int, int]] | None:
        """Write one batch's ``frame`` (columns ``columns``); None if a column does not fit.

        ``(sink, gid, rows, dead letters)`` per task, as ``ArrowWriteJob.run`` returns them.
        """
        spec = self._spec(task, columns)
        jvm: Any = frame.sparkSession._jvm
        lines = list(jvm.dev.eo.writer.PreparedCopy.run(frame._jdf, json.dumps(spec)))
        if len(lines) == 1 and lines[0].startswith(UNFIT):
            reason = lines[0][len(UNFIT) :]
            if reason not in self._refused:
                self._refused.add(reason)
                logs.event("writer", sink=task.sink, path="python", reason=reason)
            return None
        results = []
        for line in lines:
            gid, count, dead = line.split("\t")
            results.append((task.sink, gid, int(count), int(dead)))
        return results

    def _spec(self, task: WriterTask, columns: list[str]) -> dict[str, Any]:
        """The batch's spec: the sink's part (composed once) and the batch's own."""
        dead = task.dead_letters
        assert dead is None or isinstance(dead, PostgresWriter)
        gid = task.gid(0, 0)
        return {
            **self._sink_spec,
            "targetTypes": self.target_types(),
            "reasonIndex": columns.index(DL_REASON) if DL_REASON in columns else -1,
            "rawIndex": columns.index(DL_RAW) if DL_RAW in columns else -1,
            "deadLetterSql": None
            if dead is None
            else dead.copy_statement(table_identifier(dead.table)).as_string(),
            **self._refused_spec(task),
            "gidPrefix": gid[: -len("0:0")],
            "twoPhase": task.two_phase,
            "pipeline": task.pipeline,
            "batchId": task.batch_id,
            "fault": armed_action("after-some-prepared", task.batch_id),
            "driverPid": task.driver_pid,
            "keptMemoryBytes": task.kept_memory_bytes,
        }

    @staticmethod
    def _refused_spec(task: WriterTask) -> dict[str, str | None]:
        """Where records the table refuses go (``sinks.postgres.refusals``); None: they fail."""
        letters = task.refused_letters()
        if letters is None:
            return {"refusedSql": None, "refusedTable": None, "refusedCreateSql": None}
        assert isinstance(letters, PostgresWriter)
        table = table_identifier(letters.table)
        return {
            "refusedSql": letters.copy_statement(table).as_string(),
            "refusedTable": table.as_string(),
            "refusedCreateSql": sql.SQL(DEAD_LETTER_DDL).format(table).as_string(),
        }

    @functools.cached_property
    def _sink_spec(self) -> dict[str, Any]:
        """What every batch's spec of the sink holds alike: where, and the SQL to run there.

        The statements the Python writer runs too are its own texts (one definition each),
        with JDBC's ``?`` for psycopg's ``%s``.
        """
        writer = self.writer
        table = table_identifier(writer.table)
        if writer.mode == "append":
            statements: dict[str, str | None] = {
                "copySql": writer.copy_statement(table, "(FORMAT binary)").as_string(),
                "stageSql": None,
                "mergeSql": None,
                "dropSql": None,
                "clearSql": None,
            }
        else:
            stage = sql.Identifier("eo", f"stage_{STAGE}")
            create, merge, drop = writer.upsert_statements(stage)
            statements = {
                "copySql": writer.copy_statement(stage, "(FORMAT binary)").as_string(),
                "stageSql": create.as_string(),
                "mergeSql": merge.as_string(),
                "dropSql": drop.as_string(),
                "clearSql": writer.clear_statement(stage).as_string(),
            }
        return {
            "url": self.target.url,
            # The writer's own connect timeout wins over the DSN's, as in the Python task.
            "properties": {**self.target.properties, "connectTimeout": str(writer.connect_timeout)},
            **statements,
            "sessionSql": _jdbc(SESSION_SQL),
            "typesSql": _jdbc(COLUMN_TYPES_SQL),
            "markerSql": _jdbc(MARKER_SQL),
            "table": table.as_string(),
            "tableName": writer.table,
            "columns": list(writer.columns),
            "lockTimeoutMs": writer.lock_timeout_ms,
            "reopenSeconds": REOPEN_SECONDS,
        }

    def target_types(self) -> dict[str, str]:
        """The target's column types, read once per driver (the tasks check them again)."""
        if self._types is None:
            with connect_patiently(
                with_keepalives(self.writer.dsn), REOPEN_SECONDS, autocommit=True
            ) as conn:
                self._types = column_types(conn, self.writer.table)
        return self._types
