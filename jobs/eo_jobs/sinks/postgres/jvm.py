"""The PostgreSQL sink's part of eo's JVM writer (``sinks.jvm``).

Its tasks are ``dev.eo.writer.postgres``.

The tasks run the Python writer's transaction (``runtime.task``): TimeZone UTC and
lock_timeout, the rows by binary COPY (an upsert's through a staging table of the task's own,
merged by ``PostgresWriter``'s statements), the dead letters in the same transaction, the
marker, PREPARE under the same gid, and the same handling of records the table refuses
(``sinks.postgres.refusals``). A sink is the JVM writer's when:

- its DSN can be said to pgJDBC exactly (``jdbc_target``: one TCP host, no libpq environment
  variables or password file the JDBC driver would not read the same way);
- per batch, every written column has a binary form its target column's type reads as is
  (``dev.eo.writer.Kind``; a decimal, say, is not one): otherwise that batch goes through the
  Python writer, which falls back to CSV.

SQL is composed here by psycopg (identifiers quoted by the driver library), and values reach
the statements as bind parameters in the tasks.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import psycopg
from psycopg import sql

from eo_jobs.protocol.connection import REOPEN_SECONDS, connect_patiently, with_keepalives
from eo_jobs.protocol.xa import MARKER_SQL
from eo_jobs.sinks.postgres.arrow_copy import COLUMN_TYPES_SQL, column_types
from eo_jobs.sinks.postgres.refusals import DEAD_LETTER_DDL
from eo_jobs.sinks.postgres.writer import SESSION_SQL, PostgresWriter, table_identifier

if TYPE_CHECKING:
    from eo_jobs.sinks.table_writer import TableWriter, TaskWrite

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


def postgres_jvm_sink(writer: TableWriter) -> PostgresJvmSink | str:
    """The JVM writer's part for a PostgreSQL writer, or why it stays on the Python path."""
    assert isinstance(writer, PostgresWriter)
    target = jdbc_target(writer.dsn)
    if isinstance(target, str):
        return target
    return PostgresJvmSink(writer, target)


@dataclass
class PostgresJvmSink:
    """One PostgreSQL sink's part of the JVM writer's spec (``sinks.jvm.JvmSink``)."""

    writer: PostgresWriter
    target: JdbcTarget
    _types: dict[str, str] | None = field(default=None, init=False)
    _sink: dict[str, Any] | None = field(default=None, init=False)

    kind = "postgresql"
    driver_class = "org.postgresql.Driver"

    def batch_spec(self, task: TaskWrite, columns: Sequence[str]) -> dict[str, Any]:
        """The column types, and where the batch's and the refused dead letters go."""
        dead = task.dead_letters
        assert dead is None or isinstance(dead, PostgresWriter)
        return {
            "targetTypes": self.target_types(),
            "deadLetterSql": None
            if dead is None
            else dead.copy_statement(table_identifier(dead.table)).as_string(),
            **self._refused_spec(task),
        }

    @staticmethod
    def _refused_spec(task: TaskWrite) -> dict[str, str | None]:
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

    def sink_spec(self) -> dict[str, Any]:
        """Where, and the SQL to run there (composed once per driver)."""
        if self._sink is None:
            self._sink = self._compose()
        return self._sink

    def _compose(self) -> dict[str, Any]:
        """The statements the Python writer runs too are its own texts (one definition each),
        with JDBC's ``?`` for psycopg's ``%s``."""
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
