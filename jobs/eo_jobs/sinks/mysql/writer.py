"""One writer task's XA branch against a MySQL/MariaDB table.

The branch: ``XA START xid``, the rows (PyMySQL's ``executemany``, which rewrites one
``INSERT ... VALUES (...)`` into multi-row statements of up to ~1 MB), the participant's marker
row (a branch that wrote nothing is not durable on MariaDB), ``XA END``, ``XA PREPARE``, and then
the connection is **closed**: MariaDB keeps a prepared branch bound to the connection that
prepared it, and until that connection ends nobody else can commit or roll it back. On any error
the writer runs ``XA END`` + ``XA ROLLBACK`` itself (a failed statement does not fail its branch)
and closes. The xid is ``protocol.mysql_xa.xid_of(gid, database)``.

The session sets ``innodb_lock_wait_timeout`` (a writer blocked on another branch's prepared
locks fails instead of hanging) and ``wait_timeout`` (a writer frozen after ``XA PREPARE``, a
zombie, has its connection cut by the server after that long, which frees its branch for
recovery). The session's time_zone is UTC, so a TIMESTAMP column stores the instant
the row's UTC wall time names (``arrow_rows``). Append only, for now.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any, TypeAlias

import pymysql
import pymysql.cursors

from eo_jobs.protocol.mysql_xa import (
    MARKER_SQL,
    REOPEN_SECONDS,
    MySqlDsn,
    connect_patiently,
    xid_of,
)

Connection: TypeAlias = "pymysql.Connection[pymysql.cursors.Cursor]"
LOCK_WAIT_TIMEOUT_S = 30
SESSION_WAIT_TIMEOUT_S = 300
CHUNK_ROWS = 5_000
"""Rows handed to one ``executemany`` (which splits them further into ~1 MB statements)."""
MAX_IDENTIFIER = 64


def quote_identifier(name: str) -> str:
    """``name`` as one backtick-quoted MySQL identifier; refuses what MySQL would not take."""
    if not name or len(name) > MAX_IDENTIFIER or "\x00" in name or name != name.rstrip(" "):
        raise ValueError(f"not a MySQL identifier: {name!r}")
    return "`" + name.replace("`", "``") + "`"


def table_identifier(table: str) -> str:
    """``table`` or ``database.table``, quoted part by part."""
    return ".".join(quote_identifier(part) for part in table.split(".", 1))


def _chunks(rows: Iterable[Sequence[Any]], size: int) -> Iterator[list[Sequence[Any]]]:
    it = iter(rows)
    while chunk := list(islice(it, size)):
        yield chunk


@dataclass(frozen=True)
class MySqlWriter:
    """Writes one task's rows into ``table`` of the DSN's database, as one XA branch.

    Frozen and hashable: it ships to Spark executors inside ``runtime.task.WriterTask``.
    """

    dsn: str
    table: str
    columns: tuple[str, ...]
    mode: str = "append"
    key_columns: tuple[str, ...] = ()
    version_column: str | None = None
    lock_wait_timeout_s: int = LOCK_WAIT_TIMEOUT_S
    session_wait_timeout_s: int = SESSION_WAIT_TIMEOUT_S
    chunk_rows: int = CHUNK_ROWS

    def __post_init__(self) -> None:
        if not self.columns:
            raise ValueError("a writer needs at least one column")
        if self.mode != "append":
            raise ValueError(f"mode {self.mode!r}: the MySQL writer appends only, for now")

    @functools.cached_property
    def target(self) -> MySqlDsn:
        """The parsed DSN."""
        return MySqlDsn.parse(self.dsn)

    @functools.cached_property
    def insert_sql(self) -> str:
        """The multi-row INSERT ``executemany`` expands."""
        names = ", ".join(quote_identifier(c) for c in self.columns)
        marks = ", ".join(["%s"] * len(self.columns))
        table = table_identifier(self.table)
        # Identifiers quoted by quote_identifier; values are parameters.
        return f"INSERT INTO {table} ({names}) VALUES ({marks})"  # noqa: S608

    def connect(self) -> Connection:
        """A writer connection (waits out a server restart) with the session's timeouts."""
        conn = connect_patiently(self.target, REOPEN_SECONDS)
        with conn.cursor() as cur:
            cur.execute(
                "SET SESSION innodb_lock_wait_timeout = %s, wait_timeout = %s,"
                " time_zone = '+00:00'",
                (self.lock_wait_timeout_s, self.session_wait_timeout_s),
            )
        return conn

    def write(
        self, rows: Iterable[Sequence[Any]], *, gid: str | None, pipeline: str, batch_id: int
    ) -> int:
        """Write ``rows`` in one branch prepared under ``gid`` (or one committed transaction
        when ``gid`` is None), then close the connection; the row count."""
        conn = self.connect()
        try:
            return self.write_on(conn, rows, gid=gid, pipeline=pipeline, batch_id=batch_id)
        finally:
            conn.close()

    def write_on(
        self,
        conn: Connection,
        rows: Iterable[Sequence[Any]],
        *,
        gid: str | None,
        pipeline: str,
        batch_id: int,
        also: Callable[[Connection], None] | None = None,
    ) -> int:
        """``write`` on ``conn``, which is left open: the caller must close it, since the
        prepared branch stays bound to it until then. ``also`` writes more in the same
        transaction after the rows (the task's dead letters)."""
        if gid is None:
            conn.begin()
            try:
                count = self._insert(conn, rows)
                if also is not None:
                    also(conn)
                conn.commit()
            except BaseException:
                with contextlib.suppress(pymysql.Error):
                    conn.rollback()
                raise
            return count
        xid = xid_of(gid, self.target.database).sql()
        with conn.cursor() as cur:
            cur.execute(f"XA START {xid}")
            try:
                count = self._insert(conn, rows)
                if also is not None:
                    also(conn)
                cur.execute(MARKER_SQL, (gid, pipeline, batch_id, count))
                cur.execute(f"XA END {xid}")
                cur.execute(f"XA PREPARE {xid}")
            except BaseException:
                for statement in (f"XA END {xid}", f"XA ROLLBACK {xid}"):
                    with contextlib.suppress(pymysql.Error):
                        cur.execute(statement)
                raise
        return count

    def _insert(self, conn: Connection, rows: Iterable[Sequence[Any]]) -> int:
        count = 0
        with conn.cursor() as cur:
            for chunk in _chunks(rows, self.chunk_rows):
                cur.executemany(self.insert_sql, chunk)
                count += len(chunk)
        return count
