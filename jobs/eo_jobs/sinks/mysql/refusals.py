"""Records a MySQL/MariaDB table refuses: which errors those are, and the server's words.

The PostgreSQL writer's counterpart is ``sinks.postgres.refusals`` (SQLSTATE classes 22 and 23).
PyMySQL does not expose the SQLSTATE of an error, only its number, so the refusals are listed
by number (``REFUSAL_CODES``, named as in ``pymysql.constants.ER``; the few PyMySQL does not
name are MySQL 8 or MariaDB numbers, spelled out below). Each one is a value or a row the table
refuses, never a server, lock or protocol fault: a lock wait timeout (1205), a deadlock (1213)
or a lost connection fails the task as before, and Spark retries it.

The writer session runs in strict mode (``writer.SQL_MODE``), so these are errors and not
warnings: without ``STRICT_TRANS_TABLES`` MySQL would store ``NULL`` as 0 and cut a long string
to the column's length, silently. Verified on MariaDB 10.11 (``tests/sinks/mysql/
test_writer_refusals.py``): a failed multi-row ``INSERT`` leaves none of its rows and does not
fail the XA branch it runs in, so the writer can write the same rows again in smaller pieces.

A refused row goes to a callback, ``RefusedRows``: ``refused(row, refusal)``, called once per
refused row before the branch is prepared: the rows the server refuses in input order, a
value the client cannot send (NaN) as soon as it is met, before the statement it would have
joined. The writer keeps every other row. ``dead_letters.DeadLetters.refused`` is the
callback that turns the row into a dead letter in the same branch; without a callback, the
first refusal fails the write with ``RefusedRecordError``, which names the table, the column,
the error and the batch.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import pymysql
from pymysql.constants import ER

from eo_jobs.protocol.mysql_xa import error_code
from eo_jobs.sinks.postgres.refusals import RefusedRecordError

__all__ = ["REFUSAL_CODES", "Refusal", "RefusedRecordError", "RefusedRows", "is_refusal"]

CHECK_CONSTRAINT_VIOLATED = 3819
"""MySQL 8's CHECK failure (MariaDB says ``CONSTRAINT_FAILED``, 4025)."""
INVALID_JSON_TEXT = 3140
"""MySQL 8's JSON column refusing a text (MariaDB's JSON is LONGTEXT with a CHECK: 4025)."""
DATA_OUT_OF_RANGE = 1690
DUP_ENTRY_WITH_KEY_NAME = 1586
WRONG_VALUE = 1525

REFUSAL_CODES: dict[int, str] = {
    ER.BAD_NULL_ERROR: "BAD_NULL_ERROR",  # 1048 NULL into NOT NULL
    ER.WARN_NULL_TO_NOTNULL: "WARN_NULL_TO_NOTNULL",  # 1263 the same, in some multi-row forms
    ER.NO_DEFAULT_FOR_FIELD: "NO_DEFAULT_FOR_FIELD",  # 1364 a NOT NULL column not written
    ER.DATA_TOO_LONG: "DATA_TOO_LONG",  # 1406 longer than VARCHAR(n)/CHAR(n)/BLOB
    ER.WARN_DATA_OUT_OF_RANGE: "WARN_DATA_OUT_OF_RANGE",  # 1264 out of the numeric type
    DATA_OUT_OF_RANGE: "DATA_OUT_OF_RANGE",  # 1690 out of range in an expression
    ER.WARN_DATA_TRUNCATED: "WARN_DATA_TRUNCATED",  # 1265 e.g. not one of an ENUM's values
    ER.TRUNCATED_WRONG_VALUE: "TRUNCATED_WRONG_VALUE",  # 1292 a date the type cannot hold
    ER.TRUNCATED_WRONG_VALUE_FOR_FIELD: "TRUNCATED_WRONG_VALUE_FOR_FIELD",  # 1366 charset, int
    WRONG_VALUE: "WRONG_VALUE",  # 1525
    ER.WRONG_VALUE_FOR_TYPE: "WRONG_VALUE_FOR_TYPE",  # 1411
    ER.ILLEGAL_VALUE_FOR_TYPE: "ILLEGAL_VALUE_FOR_TYPE",  # 1367
    ER.INVALID_CHARACTER_STRING: "INVALID_CHARACTER_STRING",  # 1300
    ER.DIVISION_BY_ZERO: "DIVISION_BY_ZERO",  # 1365 (a generated column)
    ER.CONSTRAINT_FAILED: "CONSTRAINT_FAILED",  # 4025 MariaDB CHECK (and its JSON type)
    CHECK_CONSTRAINT_VIOLATED: "CHECK_CONSTRAINT_VIOLATED",  # 3819 MySQL CHECK
    INVALID_JSON_TEXT: "INVALID_JSON_TEXT",  # 3140 MySQL JSON
    ER.DUP_ENTRY: "DUP_ENTRY",  # 1062 a unique key (append mode, or another unique index)
    DUP_ENTRY_WITH_KEY_NAME: "DUP_ENTRY_WITH_KEY_NAME",  # 1586
    ER.NO_REFERENCED_ROW: "NO_REFERENCED_ROW",  # 1216 foreign key, old form
    ER.NO_REFERENCED_ROW_2: "NO_REFERENCED_ROW_2",  # 1452 foreign key: no parent row
    ER.ROW_IS_REFERENCED: "ROW_IS_REFERENCED",  # 1217
    ER.ROW_IS_REFERENCED_2: "ROW_IS_REFERENCED_2",  # 1451 an upsert changing a parent key
}
"""MySQL error numbers of a value or row the table refuses (with ``pymysql.constants.ER``'s
names); anything else is a fault that fails the task."""

_QUOTED_COLUMN = re.compile(r"[Cc]olumn '((?:[^']|'')+)'")
"""``Column 'c' cannot be null``, ``Data too long for column 'c' at row 2``."""
_QUALIFIED_COLUMN = re.compile(r"column `(?:[^`]|``)*`\.`(?:[^`]|``)*`\.`((?:[^`]|``)+)`")
"""MariaDB's ``for column `db`.`t`.`c` at row 2``."""
_FOREIGN_KEY = re.compile(r"CONSTRAINT `((?:[^`]|``)+)` FOREIGN KEY \(`((?:[^`]|``)+)`")
_CONSTRAINT = re.compile(r"CONSTRAINT `((?:[^`]|``)+)`|[Cc]heck constraint '((?:[^']|'')+)'")
"""MariaDB's ``CONSTRAINT `t.c` failed``, MySQL's ``Check constraint 'c' is violated``."""
_KEY = re.compile(r"for key '((?:[^']|'')+)'")


@dataclass(frozen=True)
class Refusal:
    """Why the table refused a row: the server's error number and message, and the column
    and constraint (or unique key) the message names, when it names one. ``code`` is None for
    a value the client cannot send at all (a NaN or infinite DOUBLE or DECIMAL)."""

    code: int | None
    message: str
    column: str | None = None
    constraint: str | None = None

    @classmethod
    def of(cls, exc: BaseException) -> Refusal:
        """From a PyMySQL error: its number, its message, the names the message gives."""
        code = error_code(exc)
        message = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
        column = constraint = None
        if found := _FOREIGN_KEY.search(message):
            constraint, column = found.group(1), found.group(2)
        elif found := _CONSTRAINT.search(message) or _KEY.search(message):
            constraint = next(g for g in found.groups() if g is not None)
        if column is None and (
            found := _QUALIFIED_COLUMN.search(message) or _QUOTED_COLUMN.search(message)
        ):
            column = found.group(1)
        return cls(code, message, column, constraint)

    @classmethod
    def unsendable(cls, column: str, message: str) -> Refusal:
        """A value PyMySQL refuses to write (``nan can not be used with MySQL``)."""
        return cls(None, f"{message}: MySQL holds no NaN or infinity", column)

    @property
    def name(self) -> str:
        """The error's name (``BAD_NULL_ERROR``), ``client`` for an unsendable value."""
        if self.code is None:
            return "client"
        return REFUSAL_CODES.get(self.code, "?")

    def words(self) -> str:
        """``MySQL error 1048 (BAD_NULL_ERROR), column c: Column 'c' cannot be null``."""
        said = "not sendable" if self.code is None else f"MySQL error {self.code} ({self.name})"
        if self.column:
            said += f", column {self.column}"
        if self.constraint:
            said += f", constraint {self.constraint}"
        return f"{said}: {self.message}"

    def reason(self, table: str) -> str:
        """A dead letter's reason (the PostgreSQL writer's shape, MySQL's words)."""
        return f"{table} refused the record: {self.words()}"

    def failure(self, table: str, batch_id: int) -> str:
        """Why a write stops when nothing takes refused rows."""
        return (
            f"batch {batch_id}: {table} refused a record and no dead-letter table or refusal "
            f"callback takes it: {self.words()}"
        )


RefusedRows: TypeAlias = Callable[[Sequence[Any], Refusal], None]
"""``refused(row, refusal)``: told of each row the table refused (see the module)."""


def is_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` is the table refusing a value or a row (``REFUSAL_CODES``)."""
    return isinstance(exc, pymysql.MySQLError) and error_code(exc) in REFUSAL_CODES
