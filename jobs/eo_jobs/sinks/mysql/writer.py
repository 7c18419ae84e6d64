"""One writer task's XA branch against a MySQL/MariaDB table: append or upsert.

The branch: ``XA START xid``, the rows (multi-row ``INSERT`` statements the writer builds
itself, ``chunk_rows`` rows or ``statement_chars`` characters each; an upsert's end in
``ON DUPLICATE KEY UPDATE``, ``upsert``), the dead letters if any (``dead_letters``), the
participant's marker row (a branch that wrote nothing is not durable on MariaDB), ``XA END``,
``XA PREPARE``, and then the connection is **closed**: MariaDB keeps a prepared branch bound to
the connection that prepared it, and until that connection ends nobody else can commit or roll
it back. On any error the writer runs ``XA END`` + ``XA ROLLBACK`` itself (a failed statement
does not fail its branch) and closes. The xid is ``protocol.mysql_xa.xid_of(gid, database)``.

Records the table refuses (``refusals``): a statement the server refuses with a data error
(NOT NULL, length, range, date, CHECK, unique key, foreign key) has written none of its rows,
and the branch goes on, so the writer writes that statement's rows again in halves, down to
single rows; each refused row goes to the ``refused`` callback, or into the dead-letter
table inside the same branch (``dead_letter_table``), or, with neither, fails the write naming
the table, the column and the error. A batch without a refused row pays nothing for this.

The session (``SESSION_SQL``, run at the start of every write) pins what the rows mean, as
the PostgreSQL writer pins ``TimeZone``:

* ``sql_mode`` (``SQL_MODE``): ``STRICT_TRANS_TABLES`` so that the server *refuses* a NULL in
  a NOT NULL column, a string longer than its ``VARCHAR`` or a number out of range, instead
  of storing 0, a cut string or the type's limit with a warning nobody reads. It is set in
  full, not added to the server's: ``EMPTY_STRING_IS_NULL`` (MariaDB) would turn ``''`` into
  NULL, ``ALLOW_INVALID_DATES`` would store 2024-02-30, ``NO_BACKSLASH_ESCAPES`` changes how
  literals are escaped, and ``SIMULTANEOUS_ASSIGNMENT`` changes the upsert's assignments.
* ``time_zone = '+00:00'``: a ``TIMESTAMP`` column stores the instant it is given as UTC wall
  time (``literals``), whatever the server's zone.
* ``innodb_lock_wait_timeout``: a writer blocked on another branch's prepared locks fails
  instead of hanging.
* ``wait_timeout``: a writer frozen after ``XA PREPARE``, a zombie, has its connection cut by
  the server after that long, which frees its branch for recovery.

The connection is utf8mb4 (``mysql_xa.connect``): 4-byte characters (emoji) reach the server
intact, and a column whose charset cannot hold one refuses the row.

``MySqlWriter`` is a frozen dataclass of plain values, picklable, shipped to Spark executors
as is; the statements are computed from its fields when a write runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any, TypeAlias

import pymysql
import pymysql.cursors

from eo_jobs.protocol.mysql_xa import (
    MARKER_SQL,
    REOPEN_SECONDS,
    MySqlDsn,
    connect_patiently,
    xid_of,
)
from eo_jobs.sinks.mysql.dead_letters import DeadLetters, ensure_dead_letter_table
from eo_jobs.sinks.mysql.identifiers import MAX_IDENTIFIER, quote_identifier, table_identifier
from eo_jobs.sinks.mysql.literals import UnsendableValueError, row_literal
from eo_jobs.sinks.mysql.refusals import Refusal, RefusedRecordError, RefusedRows, is_refusal
from eo_jobs.sinks.mysql.upsert import on_duplicate_key, winners

if TYPE_CHECKING:
    from eo_jobs.sinks.mysql.arrow_literals import BatchLiterals

__all__ = [
    "MAX_IDENTIFIER",
    "MySqlWriter",
    "quote_identifier",
    "table_identifier",
]

Connection: TypeAlias = "pymysql.Connection[pymysql.cursors.Cursor]"
LOCK_WAIT_TIMEOUT_S = 30
SESSION_WAIT_TIMEOUT_S = 300
CHUNK_ROWS = 5_000
"""Most rows in one statement; a statement the table refuses is written again in halves."""
STATEMENT_CHARS = 1 << 20
"""Most characters in one statement (about PyMySQL's own 1 MB; up to 4 bytes a character in
utf8mb4 stays far below ``max_allowed_packet``, 16 MiB on MariaDB 10.11, 64 MiB on MySQL 8).
Larger statements were not faster (docs/mysql.md, "Load path")."""
SQL_MODE = (
    "STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,"
    "NO_ENGINE_SUBSTITUTION"
)
"""The writer session's ``sql_mode`` (see the module): MariaDB 10.11's default without
``NO_AUTO_CREATE_USER``, which MySQL 8 no longer knows, plus the two zero-date checks."""
SESSION_SQL = (
    "SET SESSION sql_mode = %s, time_zone = '+00:00', "
    "innodb_lock_wait_timeout = %s, wait_timeout = %s"
)
MODES = ("append", "upsert")


def _chunks(rows: Iterable[Sequence[Any]], size: int) -> Iterator[list[Sequence[Any]]]:
    it = iter(rows)
    while chunk := list(islice(it, size)):
        yield chunk


@dataclass(frozen=True)
class MySqlWriter:
    """Writes one task's rows into ``table`` of the DSN's database, as one XA branch."""

    dsn: str
    table: str
    columns: tuple[str, ...]
    lock_wait_timeout_s: int = LOCK_WAIT_TIMEOUT_S
    session_wait_timeout_s: int = SESSION_WAIT_TIMEOUT_S
    chunk_rows: int = CHUNK_ROWS
    mode: str = "append"
    key_columns: tuple[str, ...] = ()
    version_column: str | None = None
    dead_letter_table: str | None = None
    """Where refused rows go, in the sink's database and branch (``dead_letters``); None:
    a refused row fails the write, unless ``write`` is given a ``refused`` callback."""
    statement_chars: int = STATEMENT_CHARS

    def __post_init__(self) -> None:
        MySqlDsn.parse(self.dsn)
        if not self.columns:
            raise ValueError("a writer needs at least one column")
        for name in (*self.columns, *self.key_columns):
            quote_identifier(name)
        table_identifier(self.table)
        if self.dead_letter_table is not None:
            table_identifier(self.dead_letter_table)
        if self.mode not in MODES:
            raise ValueError(
                f"unknown mode {self.mode!r}: a MySQL sink writes {' or '.join(MODES)}"
            )
        if self.chunk_rows < 1 or self.statement_chars < 1:
            raise ValueError("chunk_rows and statement_chars must be at least 1")
        if self.mode == "upsert":
            missing = [k for k in self.key_columns if k not in self.columns]
            if not self.key_columns or missing:
                raise ValueError(
                    f"upsert key columns {missing or '[]'} are not in the output "
                    f"({', '.join(self.columns)}): name the table's primary or unique key"
                )
            if self.version_column is not None and self.version_column not in self.columns:
                raise ValueError(
                    f"version column {self.version_column!r} is not in the output "
                    f"({', '.join(self.columns)})"
                )
            if self.version_column in self.key_columns:
                raise ValueError(
                    f"version column {self.version_column!r} is a key column: a key's rows "
                    "all have the same value there, so it cannot order them"
                )

    @property
    def target(self) -> MySqlDsn:
        """The parsed DSN."""
        return MySqlDsn.parse(self.dsn)

    @property
    def insert_prefix(self) -> str:
        """``INSERT INTO t (c1, c2) VALUES `` (rows follow as literals)."""
        names = ", ".join(quote_identifier(c) for c in self.columns)
        # Identifiers quoted by quote_identifier; values are literals escaped by PyMySQL.
        return f"INSERT INTO {table_identifier(self.table)} ({names}) VALUES "  # noqa: S608

    @property
    def insert_suffix(self) -> str:
        """An upsert's ``ON DUPLICATE KEY UPDATE`` clause; nothing for append."""
        if self.mode == "append":
            return ""
        return on_duplicate_key(self.columns, self.key_columns, self.version_column)

    @property
    def insert_sql(self) -> str:
        """One row's statement, with ``%s`` parameters (for a caller's ``executemany``)."""
        marks = ", ".join(["%s"] * len(self.columns))
        return f"{self.insert_prefix}({marks}){self.insert_suffix}"

    def connect(self) -> Connection:
        """A writer connection (waits out a server restart) with the session's settings."""
        conn = connect_patiently(self.target, REOPEN_SECONDS)
        self.session(conn)
        return conn

    def session(self, conn: Connection) -> None:
        """Pin the session's settings (``SESSION_SQL``, see the module)."""
        if conn.charset != "utf8mb4":
            raise ValueError(
                f"the writer's connection to {self.target.label()} uses charset "
                f"{conn.charset!r}: connect with charset='utf8mb4' (mysql_xa.connect does), "
                "or 4-byte characters are lost"
            )
        with conn.cursor() as cur:
            cur.execute(
                SESSION_SQL, (SQL_MODE, self.lock_wait_timeout_s, self.session_wait_timeout_s)
            )

    def write(
        self,
        rows: Iterable[Sequence[Any]],
        *,
        gid: str | None,
        pipeline: str,
        batch_id: int,
        refused: RefusedRows | None = None,
        dead_letters: DeadLetters | None = None,
    ) -> int:
        """Write ``rows`` in one branch prepared under ``gid`` (or one committed transaction
        when ``gid`` is None), then close the connection; the rows the table took (``write_on``
        says which are counted)."""
        conn = self.connect()
        try:
            return self.write_on(
                conn,
                rows,
                gid=gid,
                pipeline=pipeline,
                batch_id=batch_id,
                refused=refused,
                dead_letters=dead_letters,
            )
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
        refused: RefusedRows | None = None,
        dead_letters: DeadLetters | None = None,
    ) -> int:
        """``write`` on ``conn``, which is left open: the caller must close it, since the
        prepared branch stays bound to it until then. ``conn`` must be in autocommit with no
        open transaction (``connect`` makes one).

        Returns the rows the table took: append, every row not refused; upsert, one per key
        (``upsert.winners``) not refused, whether the guard let it replace the stored row or
        not. ``refused`` is told of each refused row (``refusals.RefusedRows``); without it,
        refused rows become dead letters when the writer has a ``dead_letter_table``, and
        fail the write otherwise. ``dead_letters`` (needs ``dead_letter_table``) collects
        them, and may hold letters the caller adds; they are written in the same branch.
        """
        return self._branch(
            conn,
            lambda told: self._insert(conn, rows, told, batch_id),
            gid=gid,
            pipeline=pipeline,
            batch_id=batch_id,
            refused=refused,
            dead_letters=dead_letters,
        )

    def write_arrow(
        self,
        batches: Iterable[Any],
        *,
        gid: str | None,
        pipeline: str,
        batch_id: int,
        refused: RefusedRows | None = None,
        dead_letters: DeadLetters | None = None,
    ) -> int:
        """``write`` of Arrow record batches (``write_arrow_on``), then close the connection."""
        conn = self.connect()
        try:
            return self.write_arrow_on(
                conn,
                batches,
                gid=gid,
                pipeline=pipeline,
                batch_id=batch_id,
                refused=refused,
                dead_letters=dead_letters,
            )
        finally:
            conn.close()

    def write_arrow_on(
        self,
        conn: Connection,
        batches: Iterable[Any],
        *,
        gid: str | None,
        pipeline: str,
        batch_id: int,
        refused: RefusedRows | None = None,
        dead_letters: DeadLetters | None = None,
    ) -> int:
        """``write_on`` of Arrow record batches whose columns are the writer's, in order.

        An append builds its statements' literals in Arrow (``arrow_literals``) and falls
        back to the Python path (``arrow_rows.python_rows`` and ``literals.row_literal``) for
        what Arrow does not write: a batch with a column of another type, a row with a NaN or
        infinite float (refused there as in ``write_on``), and every row of a statement the
        table refuses, which is then written again in halves exactly as ``write_on`` does.
        An upsert takes the Python path (``upsert.winners`` works on Python rows). The
        branch, marker, dead letters and count are ``write_on``'s.
        """
        return self._branch(
            conn,
            lambda told: self._insert_arrow(conn, batches, told, batch_id),
            gid=gid,
            pipeline=pipeline,
            batch_id=batch_id,
            refused=refused,
            dead_letters=dead_letters,
        )

    def _branch(
        self,
        conn: Connection,
        insert: Callable[[RefusedRows | None], int],
        *,
        gid: str | None,
        pipeline: str,
        batch_id: int,
        refused: RefusedRows | None,
        dead_letters: DeadLetters | None,
    ) -> int:
        """The XA sequence around ``insert`` (given the refused-row callback; returns the
        rows taken), shared by ``write_on`` and ``write_arrow_on``."""
        if dead_letters is not None and self.dead_letter_table is None:
            raise ValueError(
                f"dead letters for {self.table} but the writer has no dead_letter_table: "
                "build it with MySqlWriter(..., dead_letter_table=<table>)"
            )
        self.session(conn)
        if self.dead_letter_table is not None:
            ensure_dead_letter_table(conn, self.dead_letter_table)  # DDL: before the branch
            if dead_letters is None:
                dead_letters = DeadLetters(pipeline, batch_id, self.table, self.columns)
        if refused is None and dead_letters is not None:
            refused = dead_letters.refused

        def body() -> int:
            count = insert(refused)
            if dead_letters is not None and self.dead_letter_table is not None:
                dead_letters.write_on(conn, self.dead_letter_table)
            return count

        if gid is None:
            conn.begin()
            try:
                count = body()
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
                count = body()
                cur.execute(MARKER_SQL, (gid, pipeline, batch_id, count))
                cur.execute(f"XA END {xid}")
                cur.execute(f"XA PREPARE {xid}")
            except BaseException:
                for statement in (f"XA END {xid}", f"XA ROLLBACK {xid}"):
                    with contextlib.suppress(pymysql.Error):
                        cur.execute(statement)
                raise
        return count

    def _insert_arrow(
        self,
        conn: Connection,
        batches: Iterable[Any],
        refused: RefusedRows | None,
        batch_id: int,
    ) -> int:
        """Every row of ``batches`` (see ``write_arrow_on``); rows taken."""
        from eo_jobs.sinks.mysql.arrow_literals import batch_literals, no_backslash_escapes
        from eo_jobs.sinks.mysql.arrow_rows import python_rows

        if self.mode == "upsert":
            return self._insert(conn, python_rows(batches), refused, batch_id)
        quotes_only = no_backslash_escapes(conn)
        count = 0
        for batch in batches:
            if not batch.num_rows:
                continue
            if batch.num_columns != len(self.columns):
                raise ValueError(
                    f"a record batch of {batch.num_columns} columns "
                    f"({', '.join(batch.schema.names)}) for the {len(self.columns)} columns "
                    f"{', '.join(self.columns)}: the writer's columns must match the batches"
                )
            found = batch_literals(batch, quotes_only)
            if found is None:
                count += self._insert(conn, python_rows([batch]), refused, batch_id)
            else:
                count += self._insert_literals(conn, batch, found, refused, batch_id)
        return count

    def _insert_literals(
        self,
        conn: Connection,
        batch: Any,
        found: BatchLiterals,
        refused: RefusedRows | None,
        batch_id: int,
    ) -> int:
        """One batch's rows from its Arrow literals, in statements of ``chunk_rows`` /
        ``statement_chars``; an unsendable row through ``row_literal`` (which refuses it)."""
        texts: list[str] = found.rows.to_pylist()
        bad: list[bool] | None = None if found.unsendable is None else found.unsendable.to_pylist()
        base = len(self.insert_prefix) + len(self.insert_suffix)
        count = 0
        with conn.cursor() as cur:
            held: list[int] = []
            literals: list[str] = []
            size = base
            for i, text in enumerate(texts):
                literal = text
                if bad is not None and bad[i]:
                    row = _python_row(batch, i)
                    try:
                        literal = row_literal(conn, self.columns, row)
                    except UnsendableValueError as exc:
                        refusal = Refusal.unsendable(exc.column, exc.message)
                        if refused is None:
                            raise RefusedRecordError(refusal.failure(self.table, batch_id)) from exc
                        refused(row, refusal)
                        continue
                if literals and (
                    len(held) >= self.chunk_rows or size + len(literal) + 1 > self.statement_chars
                ):
                    count += self._arrow_statement(
                        cur, conn, batch, held, literals, refused, batch_id
                    )
                    held, literals, size = [], [], base
                held.append(i)
                literals.append(literal)
                size += len(literal) + 1
            count += self._arrow_statement(cur, conn, batch, held, literals, refused, batch_id)
        return count

    def _arrow_statement(
        self,
        cur: pymysql.cursors.Cursor,
        conn: Connection,
        batch: Any,
        held: list[int],
        literals: list[str],
        refused: RefusedRows | None,
        batch_id: int,
    ) -> int:
        """Run one statement of Arrow ``literals`` (rows ``held`` of ``batch``); if the table
        refuses it, those rows take the Python path's halving (``_statement``); rows taken."""
        if not literals:
            return 0
        try:
            # Identifiers quoted; values quoted and escaped in Arrow (arrow_literals).
            cur.execute(self.insert_prefix + ",".join(literals) + self.insert_suffix)
        except pymysql.MySQLError as exc:
            if not is_refusal(exc):
                raise
            from eo_jobs.sinks.mysql.arrow_rows import python_rows

            rows: list[Sequence[Any]] = list(python_rows([batch.take(held)]))
            again = [row_literal(conn, self.columns, row) for row in rows]
            return self._statement(cur, rows, again, refused, batch_id, refusal=exc)
        return len(held)

    def _insert(
        self,
        conn: Connection,
        rows: Iterable[Sequence[Any]],
        refused: RefusedRows | None,
        batch_id: int,
    ) -> int:
        """Every row, in statements of ``chunk_rows``/``statement_chars``; rows taken."""
        if self.mode == "upsert":
            index = {c: i for i, c in enumerate(self.columns)}
            version = None if self.version_column is None else index[self.version_column]
            rows = winners(rows, [index[k] for k in self.key_columns], version)
        prefix, suffix = self.insert_prefix, self.insert_suffix
        count = 0
        with conn.cursor() as cur:
            for chunk in _chunks(rows, self.chunk_rows):
                held: list[Sequence[Any]] = []
                literals: list[str] = []
                size = len(prefix) + len(suffix)
                for row in chunk:
                    try:
                        literal = row_literal(conn, self.columns, row)
                    except UnsendableValueError as exc:
                        refusal = Refusal.unsendable(exc.column, exc.message)
                        if refused is None:
                            raise RefusedRecordError(refusal.failure(self.table, batch_id)) from exc
                        refused(row, refusal)
                        continue
                    if literals and size + len(literal) + 1 > self.statement_chars:
                        count += self._statement(cur, held, literals, refused, batch_id)
                        held, literals, size = [], [], len(prefix) + len(suffix)
                    held.append(row)
                    literals.append(literal)
                    size += len(literal) + 1
                count += self._statement(cur, held, literals, refused, batch_id)
        return count

    def _statement(
        self,
        cur: pymysql.cursors.Cursor,
        rows: list[Sequence[Any]],
        literals: list[str],
        refused: RefusedRows | None,
        batch_id: int,
        refusal: pymysql.MySQLError | None = None,
    ) -> int:
        """Run one statement of ``literals``; if the table refuses it, its rows again in
        halves down to single rows (a refused statement wrote nothing); rows taken.
        ``refusal``: the server already refused these rows as one statement (the Arrow
        path's), so the halving starts without sending it again."""
        prefix, suffix = self.insert_prefix, self.insert_suffix
        count = 0
        pending = [(0, len(literals))]
        while pending:
            lo, hi = pending.pop()
            if lo >= hi:
                continue
            failed, refusal = refusal, None
            if failed is None:
                try:
                    # Identifiers quoted, values escaped by PyMySQL (literals.row_literal).
                    cur.execute(prefix + ",".join(literals[lo:hi]) + suffix)
                except pymysql.MySQLError as exc:
                    if not is_refusal(exc):
                        raise
                    failed = exc
                else:
                    count += hi - lo
                    continue
            if refused is None:
                raise RefusedRecordError(
                    Refusal.of(failed).failure(self.table, batch_id)
                ) from failed
            if hi - lo == 1:
                refused(rows[lo], Refusal.of(failed))
                continue
            middle = (lo + hi) // 2
            pending += [(middle, hi), (lo, middle)]  # the first half runs first
        return count


def _python_row(batch: Any, index: int) -> tuple[Any, ...]:
    """Row ``index`` of ``batch`` as the Python path's values (``arrow_rows``)."""
    from eo_jobs.sinks.mysql.arrow_rows import python_rows

    return next(python_rows([batch.slice(index, 1)]))
