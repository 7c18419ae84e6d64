"""Records the target table refuses: found in the failing write only, kept as dead letters.

A record can parse, pass the transform and the poison checks (``runtime.poison``) and still be
refused by the table's own rules: NOT NULL (SQLSTATE 23502), ``varchar(n)`` length (22001), a
CHECK (23514), a foreign key (23503), a unique index in append mode (23505), a date or
timestamp PostgreSQL cannot hold (22008), a character the database encoding cannot hold
(22P05, 22021). Without isolation such a record fails its batch on every replay.

One mechanism for all of them, in both writers (``arrow_copy`` here, ``dev.eo.writer`` in the
JVM): the task's write (COPY, or an upsert's COPY and merge) runs as it always does; only when
it raises SQLSTATE class 22 (data exception) or 23 (integrity constraint violation) does the
task roll its transaction back (nothing precedes the rows in it), start it again and write the
same rows in pieces, each under a SAVEPOINT (allowed in a transaction later PREPAREd), halving
a refused piece until the refused rows stand alone. Each of those becomes a dead letter in the
same transaction as the rest of the task's rows, so it is exactly-once too. A batch with no
refused record pays nothing for this beyond keeping its rows until the task's write ends
(``kept``: in memory up to a bound, in an unlinked temporary file past it).

The dead letter goes to the pipeline's dead-letter table (``spec.deadLetter.table``) in the
sink's own database: for the first sink that is the table every other dead letter goes to; for
another sink on another database it is a table of the same name there, created when
``to_regclass`` does not find it (in its own committed transaction, so that two tasks creating
it never wait on each other's prepared transaction; a role without CREATE needs it made
beforehand). The table keeps its columns (pipeline, batch_id, raw, reason, recorded_at): the
database's own words go into ``reason`` as ``<table> refused the record: SQLSTATE <code>,
column <c>, constraint <k>: <message> (<detail>)``, because new columns would need an
``ALTER TABLE`` on a table that may be owned by another role, and every dead letter keeps one
shape. ``raw`` is the record as JSON (column name to value), characters outside ASCII escaped
(``\\u00e9``): a record refused because the database encoding cannot hold a character must
still fit in its dead letter.

With ``onRefusedRecord: fail`` the task fails instead, with the batch, the column and the
database's message (Spark reports it, and it becomes the driver's exit reason).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import sql

REFUSAL_CLASSES = frozenset({"22", "23"})
"""SQLSTATE classes of a value or row the table refuses (not of a server or protocol fault)."""
DEAD_LETTER_COLUMNS = ("pipeline", "batch_id", "raw", "reason")
DEAD_LETTER_DDL = (
    "CREATE TABLE IF NOT EXISTS {} (pipeline text NOT NULL, batch_id bigint NOT NULL, "
    "raw text, reason text NOT NULL, recorded_at timestamptz NOT NULL DEFAULT now())"
)
"""The dead-letter table, made by eo when it does not exist (eo owns it)."""
COPY_COLUMN = re.compile(r"^COPY [^\n]*?, line \d+, column (.+?)(?::|$)", re.MULTILINE)
"""The column COPY's error context names (``COPY orders, line 3, column merchant: "..."``)."""
SAVEPOINT = "eo_rows"


def is_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` is the database refusing a value or a row (SQLSTATE class 22 or 23)."""
    return isinstance(exc, psycopg.Error) and (exc.sqlstate or "")[:2] in REFUSAL_CLASSES


@dataclass(frozen=True)
class Refusal:
    """The database's own words about a refused row."""

    sqlstate: str
    message: str
    column: str | None = None
    constraint: str | None = None
    detail: str | None = None

    @classmethod
    def of(cls, exc: psycopg.Error) -> Refusal:
        """From a psycopg error: the column PostgreSQL names, or the one COPY's context names."""
        diag = exc.diag
        column = diag.column_name
        if column is None and diag.context:
            found = COPY_COLUMN.search(diag.context)
            column = found.group(1) if found else None
        return cls(
            sqlstate=exc.sqlstate or "",
            message=diag.message_primary or str(exc).strip(),
            column=column,
            constraint=diag.constraint_name,
            detail=diag.message_detail,
        )

    def words(self) -> str:
        """``SQLSTATE 23502, column c: message (detail)``; the JVM writer says it alike."""
        said = f"SQLSTATE {self.sqlstate}"
        if self.column:
            said += f", column {self.column}"
        if self.constraint:
            said += f", constraint {self.constraint}"
        said += f": {self.message}"
        if self.detail:
            said += f" ({self.detail})"
        return said

    def reason(self, table: str) -> str:
        """A dead letter's reason."""
        return f"{table} refused the record: {self.words()}"

    def failure(self, table: str, batch_id: int) -> str:
        """Why a task stops under ``onRefusedRecord: fail``."""
        return f"batch {batch_id}: {table} refused a record (onRefusedRecord: fail): {self.words()}"


class RefusedRecordError(RuntimeError):
    """A record the table refused, with ``onRefusedRecord: fail``."""


def isolate(
    conn: psycopg.Connection[Any],
    rows: int,
    write: Callable[[int, int], int],
    refuse: Callable[[int, Refusal], None],
) -> int:
    """Write rows ``[0, rows)`` in pieces under savepoints; rows written (see the module).

    ``write(lo, hi)`` writes rows ``[lo, hi)`` and returns its count; a piece the database
    refuses is rolled back to its savepoint and halved, and a single refused row goes to
    ``refuse(index, refusal)``. Pieces run in input order, so an upsert's rows merge in the
    order the whole batch would have merged them. The whole was refused already, so the first
    pieces are its halves.
    """
    count = 0
    pending = [(rows // 2, rows), (0, rows // 2)] if rows > 1 else [(0, rows)]
    while pending:
        lo, hi = pending.pop()
        if lo >= hi:
            continue
        conn.execute(sql.SQL("SAVEPOINT {}").format(sql.Identifier(SAVEPOINT)))
        try:
            written = write(lo, hi)
        except psycopg.Error as exc:
            if not is_refusal(exc):
                raise
            conn.execute(sql.SQL("ROLLBACK TO SAVEPOINT {}").format(sql.Identifier(SAVEPOINT)))
            conn.execute(sql.SQL("RELEASE SAVEPOINT {}").format(sql.Identifier(SAVEPOINT)))
            if hi - lo == 1:
                refuse(lo, Refusal.of(exc))
            else:
                middle = (lo + hi) // 2
                pending += [(middle, hi), (lo, middle)]
            continue
        conn.execute(sql.SQL("RELEASE SAVEPOINT {}").format(sql.Identifier(SAVEPOINT)))
        count += written
    return count


def ensure_dead_letter_table(conn: psycopg.Connection[Any], dsn: str, table: str) -> None:
    """Make ``table`` if ``to_regclass`` does not find it (see the module: its own transaction).

    ``conn`` is the task's transaction, which sees the table once it is committed.
    """
    name = _identifier(table)
    found = conn.execute("SELECT to_regclass(%s)", (name.as_string(conn),)).fetchone()
    if found is not None and found[0] is not None:
        return
    with (
        psycopg.connect(dsn, autocommit=True) as other,
        # Another task made it at the same moment.
        contextlib.suppress(psycopg.errors.DuplicateTable, psycopg.errors.UniqueViolation),
    ):
        other.execute(sql.SQL(DEAD_LETTER_DDL).format(name))


def _identifier(table: str) -> sql.Identifier:
    schema, _, name = table.partition(".")
    return sql.Identifier(schema, name)


def record_json(names: list[str], values: list[Any]) -> str:
    """A refused row as JSON, column name to value (the dead letter's ``raw``)."""
    return json.dumps(
        {name: _jsonable(value) for name, value in zip(names, values, strict=True)},
        ensure_ascii=True,  # fits any database encoding: the value may be what it refused
        default=str,
    )


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value
